"""Where the daemons' Redis passwords live (redis.password_file, read by store/conn.py).

A directory (the layout `labq admin acl --apply` makes, /etc/labq/secrets): one file per role,
named after it (labq-scheduler, labq-node-gpu1, labq-admin, labq-client), mode 0600, owned by the
daemon that reads it (the scheduler's by its user, `labq` under systemd; a node's by root, and
copied to that node). A host that runs both daemons names the same directory; each reads its own.
Or, as before, one file of ROLE PASSWORD lines.

Adding a role writes that role's file and opens no other (issue 34: adding a node rewrote the one
file as root:root 0600, and the scheduler, running as labq, could no longer start). The old single
file, where one is kept, is rewritten with the owner and mode it had.
"""
import os

HEADER = "# labq Redis ACL password: ROLE PASSWORD (labq admin acl --apply)\n"


def role_path(path: str, role: str) -> str:
    """The file that holds `role`'s password under redis.password_file `path`."""
    return os.path.join(path, role) if os.path.isdir(path) else path


def read(path: str) -> dict[str, str]:
    """{role: password} of a password file, or of each file of a password directory that this
    process may read (another daemon's is skipped); {} when there is none."""
    if not os.path.isdir(path):
        try:
            return _lines(path)
        except FileNotFoundError:
            return {}
    out = {}
    for name in sorted(os.listdir(path)):
        try:
            out.update(_lines(os.path.join(path, name)))
        except (PermissionError, IsADirectoryError):
            continue
    return out


def _lines(path: str) -> dict[str, str]:
    with open(path) as f:
        pairs = (line.split(None, 1) for line in (x.strip() for x in f) if line and not line.startswith("#"))
        return {p[0]: p[1].strip() for p in pairs if len(p) == 2}


def add(path: str, passwords: dict[str, str], owners: dict[str, tuple[int, int]]) -> list[str]:
    """Store the roles of `passwords` that `path` does not hold yet and nothing else; the roles
    written. A directory, or a path not there yet (made a directory, 0755): one new file per role,
    0600, given to owners[role] (uid, gid) when we are root. An existing file: rewritten whole,
    keeping its owner and mode."""
    if os.path.isfile(path):
        have = read(path)
        new = sorted(set(passwords) - set(have))
        if new:
            _rewrite(path, {**have, **{r: passwords[r] for r in new}})
        return new
    os.makedirs(path, mode=0o755, exist_ok=True)
    new = sorted(r for r in passwords if not os.path.lexists(os.path.join(path, r)))
    for role in new:
        fd = os.open(os.path.join(path, role), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            if os.geteuid() == 0 and role in owners:
                os.fchown(fd, *owners[role])
            os.fchmod(fd, 0o600)
            os.write(fd, f"{HEADER}{role} {passwords[role]}\n".encode())
        finally:
            os.close(fd)
    return new


def _rewrite(path: str, passwords: dict[str, str]) -> None:
    st = os.stat(path)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        if os.geteuid() == 0:
            os.fchown(fd, st.st_uid, st.st_gid)
        os.fchmod(fd, st.st_mode & 0o777)
        f.write("# labq Redis ACL passwords: ROLE PASSWORD (labq admin acl --apply)\n")
        f.writelines(f"{k} {v}\n" for k, v in sorted(passwords.items()))
    os.replace(tmp, path)
