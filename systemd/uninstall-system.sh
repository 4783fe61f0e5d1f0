#!/bin/sh
# make uninstall-system: what make install-system made, removed (run as root, the same paths).
#
# Removed: $PREFIX (the virtualenv), $BINDIR/labq (only if it is the link install-system made), the two
# units in $UNITDIR (stopped and disabled first where systemd runs), $DOCDIR. Kept: $SYSCONFDIR
# (the sysadmin's labq.toml and password files) and every state directory (/var/lib/labq-scheduler's
# archive and state file, /var/lib/labq's spool, Redis): data is never removed by an uninstall.
set -eu
PREFIX=${PREFIX:-/opt/labq}
BINDIR=${BINDIR:-/usr/local/bin}
SYSCONFDIR=${SYSCONFDIR:-/etc/labq}
UNITDIR=${UNITDIR:-/etc/systemd/system}
DOCDIR=${DOCDIR:-/usr/share/doc/labq}

if [ "$(id -u)" != 0 ] && [ -z "${LABQ_INSTALL_UNPRIVILEGED:-}" ]; then
  echo "uninstall-system: run as root" >&2; exit 2
fi
if [ "$UNITDIR" = /etc/systemd/system ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now labq-worker.service labq-scheduler.service 2>/dev/null || true
fi
for u in labq-scheduler.service labq-worker.service; do rm -f "$UNITDIR/$u"; done
if [ "$UNITDIR" = /etc/systemd/system ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
if [ -L "$BINDIR/labq" ] && [ "$(readlink "$BINDIR/labq")" = "$PREFIX/bin/labq" ]; then rm -f "$BINDIR/labq"; fi
rm -rf "$PREFIX" "$DOCDIR"
echo "uninstall-system: removed $PREFIX, $BINDIR/labq, the units and $DOCDIR; kept $SYSCONFDIR and the state directories"
