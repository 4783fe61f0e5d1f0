"""MUNGE credentials through libmunge (ctypes), with the `munge`/`unmunge` commands as a fallback.

munged vouches for the uid/gid of the process that asked it for a credential; any host with the
same key can decode it. A credential carries a payload (here: the digest of the request it
authenticates) and is valid once, for its TTL. libmunge is preferred: one round trip on munged's
socket, where the commands cost a fork and exec each (bench/auth_bench.py measures both).
"""
import ctypes
import shutil
import subprocess
from dataclasses import dataclass

# munge.h: munge_opt_t and munge_err_t values (stable since 0.5).
OPT_TTL, OPT_ENCODE_TIME, OPT_SOCKET = 4, 6, 8
SUCCESS, SOCKET, EXPIRED, REWOUND, REPLAYED = 0, 6, 15, 16, 17


class MungeError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Decoded:
    """What munged says of a credential. `code` is SUCCESS, or EXPIRED/REWOUND/REPLAYED: for those
    munged still tells who made it, and the caller decides (a redelivered request is a replay)."""
    uid: int
    gid: int
    payload: bytes
    encoded_at: int
    code: int = SUCCESS


class _Lib:
    def __init__(self, lib):
        self.lib = lib
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint),
                                     ctypes.POINTER(ctypes.c_uint)]
        lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_strerror.restype = ctypes.c_char_p
        lib.munge_strerror.restype = ctypes.c_char_p
        self.libc = ctypes.CDLL(None)
        self.libc.free.argtypes = [ctypes.c_void_p]

    def _ctx(self, socket: str, ttl: int = 0):
        ctx = self.lib.munge_ctx_create()
        if not ctx:
            raise MungeError(5, "munge: out of memory creating a context")
        if socket:
            self.lib.munge_ctx_set(ctypes.c_void_p(ctx), OPT_SOCKET, ctypes.c_char_p(socket.encode()))
        if ttl:
            self.lib.munge_ctx_set(ctypes.c_void_p(ctx), OPT_TTL, ctypes.c_int(ttl))
        return ctx

    def _error(self, ctx, code: int) -> MungeError:
        msg = self.lib.munge_ctx_strerror(ctx) or self.lib.munge_strerror(code) or b"error"
        return MungeError(code, f"munge: {msg.decode(errors='replace')}")

    def encode(self, payload: bytes, socket: str, ttl: int) -> str:
        ctx = self._ctx(socket, ttl)
        try:
            out = ctypes.c_char_p()
            code = self.lib.munge_encode(ctypes.byref(out), ctx, payload, len(payload))
            if code != SUCCESS:
                raise self._error(ctx, code)
            # The credential was malloc'ed by libmunge: copy it, then free it with libc's free.
            cred = ctypes.string_at(out).decode()
            self.libc.free(ctypes.cast(out, ctypes.c_void_p))
            return cred
        finally:
            self.lib.munge_ctx_destroy(ctx)

    def decode(self, cred: str, socket: str) -> Decoded:
        ctx = self._ctx(socket)
        try:
            buf, n = ctypes.c_void_p(), ctypes.c_int()
            uid, gid = ctypes.c_uint(), ctypes.c_uint()
            code = self.lib.munge_decode(cred.encode(), ctx, ctypes.byref(buf), ctypes.byref(n),
                                         ctypes.byref(uid), ctypes.byref(gid))
            payload = ctypes.string_at(buf, n.value) if buf.value else b""
            if buf.value:
                self.libc.free(buf)
            if code not in (SUCCESS, EXPIRED, REWOUND, REPLAYED):
                raise self._error(ctx, code)
            t = ctypes.c_long()
            self.lib.munge_ctx_get(ctypes.c_void_p(ctx), OPT_ENCODE_TIME, ctypes.byref(t))
            return Decoded(uid.value, gid.value, payload, t.value, code)
        finally:
            self.lib.munge_ctx_destroy(ctx)


class _Commands:
    """`munge` and `unmunge`: the same, at a fork and exec per call."""

    def encode(self, payload: bytes, socket: str, ttl: int) -> str:
        cmd = ["munge", *(["-S", socket] if socket else []), *(["-t", str(ttl)] if ttl else [])]
        p = subprocess.run(cmd, input=payload, capture_output=True, timeout=10)
        if p.returncode:
            raise MungeError(p.returncode, f"munge: {p.stderr.decode(errors='replace').strip()}")
        return p.stdout.decode().strip()

    def decode(self, cred: str, socket: str) -> Decoded:
        cmd = ["unmunge", *(["-S", socket] if socket else []), "-k", "UID,GID,ENCODE_TIME", "-N"]
        p = subprocess.run(cmd, input=cred.encode(), capture_output=True, timeout=10)
        if p.returncode not in (SUCCESS, EXPIRED, REWOUND, REPLAYED):
            raise MungeError(p.returncode, f"munge: {p.stderr.decode(errors='replace').strip() or 'decode failed'}")
        head, _, payload = p.stdout.partition(b"\n\n")     # metadata, a blank line, the payload
        meta = {k.strip(): int(v) for k, v in (line.split(":", 1) for line in head.decode().splitlines())}
        return Decoded(meta["UID"], meta["GID"], payload, meta["ENCODE_TIME"], p.returncode)


_backend = None


def backend(prefer: str = "lib"):
    """libmunge when it loads, else the commands; MungeError when neither is installed."""
    global _backend
    if prefer == "commands":
        return _Commands()
    if _backend is None:
        try:
            _backend = _Lib(ctypes.CDLL("libmunge.so.2"))
        except OSError:
            if not shutil.which("munge"):
                raise MungeError(SOCKET, "munge is not installed (libmunge.so.2 and the munge command are "
                                         "missing): install it, or set security.auth = \"none\"") from None
            _backend = _Commands()
    return _backend


def encode(payload: bytes, socket: str = "", ttl: int = 0) -> str:
    return backend().encode(payload, socket, ttl)


def decode(cred: str, socket: str = "") -> Decoded:
    return backend().decode(cred, socket)
