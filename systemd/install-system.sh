#!/bin/sh
# make install-system: labq for every user of this machine (run as root).
#
#   $PREFIX          a virtualenv built with the system interpreter, labq installed as a wheel
#   $BINDIR/labq     a link to it (on every user's PATH)
#   $SYSCONFDIR      labq.toml from systemd/labq.toml when absent, 0644: every user's labq reads it, so
#                    no secrets in it (passwords go in root-only files named by redis.password_file)
#   $UNITDIR         the two systemd units, their ExecStart pointing at $BINDIR/labq
#   $DOCDIR          README, the admin guide, systemd/README.md (the units' Documentation=), and
#                    config.example.toml (every key)
#
# Every path can be moved (the test suite installs into a scratch prefix). Re-running upgrades labq in
# place and never overwrites an existing labq.toml.
set -eu
PYTHON=${PYTHON:-/usr/bin/python3}
PREFIX=${PREFIX:-/opt/labq}
BINDIR=${BINDIR:-/usr/local/bin}
SYSCONFDIR=${SYSCONFDIR:-/etc/labq}
UNITDIR=${UNITDIR:-/etc/systemd/system}
DOCDIR=${DOCDIR:-/usr/share/doc/labq}
SRC=$(cd "$(dirname "$0")/.." && pwd)

[ -x "$PYTHON" ] || { echo "install-system: $PYTHON not found (apt-get install -y python3 python3-venv)" >&2; exit 2; }
if [ "$(id -u)" != 0 ] && [ -z "${LABQ_INSTALL_UNPRIVILEGED:-}" ]; then
  echo "install-system: run as root (it writes $PREFIX, $BINDIR, $SYSCONFDIR, $UNITDIR)" >&2; exit 2
fi
umask 022    # everything installed is readable and runnable by every user

[ -x "$PREFIX/bin/python" ] || "$PYTHON" -m venv "$PREFIX"
"$PREFIX/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
# A wheel, not an editable install: the installed labq must not depend on this checkout.
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
# The build's own chatter (setuptools' notices about this pyproject.toml, a pip.conf's unreachable
# indexes) goes to a log shown only when a step fails: a successful install prints its two lines.
quiet() { "$@" >"$WHEELS/pip.log" 2>&1 || { cat "$WHEELS/pip.log" >&2; echo "install-system: failed: $*" >&2; exit 1; }; }
quiet "$PREFIX/bin/pip" wheel -q --no-deps -w "$WHEELS" "$SRC"
quiet "$PREFIX/bin/pip" install -q --upgrade --force-reinstall --no-deps "$WHEELS"/labq-*.whl
quiet "$PREFIX/bin/pip" install -q "$WHEELS"/labq-*.whl     # its dependencies, where missing
quiet "$PREFIX/bin/python" -m labq.launcher "$PREFIX/bin/labq"   # pip's launcher, less its `import re`

mkdir -p "$BINDIR" "$SYSCONFDIR" "$UNITDIR" "$DOCDIR"
ln -sf "$PREFIX/bin/labq" "$BINDIR/labq"
if [ ! -e "$SYSCONFDIR/labq.toml" ]; then
  # A starting point with no accounts, budgets or users of the example's imaginary lab: those would be
  # live at once. Every key, with its default, is in $DOCDIR/config.example.toml.
  install -m 0644 "$SRC/systemd/labq.toml" "$SYSCONFDIR/labq.toml"
  echo "install-system: wrote $SYSCONFDIR/labq.toml (set redis.url; see $DOCDIR/admin.md)"
fi
for u in labq-scheduler.service labq-worker.service; do
  sed -e "s|/usr/local/bin/labq|$BINDIR/labq|g" -e "s|/etc/labq/|$SYSCONFDIR/|g" \
      -e "s|/usr/share/doc/labq/|$DOCDIR/|g" "$SRC/systemd/$u" > "$UNITDIR/$u"
  chmod 0644 "$UNITDIR/$u"
done
install -m 0644 "$SRC/README.md" "$DOCDIR/README.md"
install -m 0644 "$SRC/systemd/README.md" "$DOCDIR/systemd.md"
install -m 0644 "$SRC/config.example.toml" "$DOCDIR/config.example.toml"
for d in "$SRC"/docs/*.md; do install -m 0644 "$d" "$DOCDIR/"; done
echo "install-system: labq $("$PREFIX/bin/labq" --version | awk '{print $2}') in $PREFIX; command $BINDIR/labq"
