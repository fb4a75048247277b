"""Root-confined file access for the file tools (SPEC §6).

A path check alone is not confinement: between "is this path inside the root?" and ``open``
a directory component can be swapped for a symlink to ``/``. So every open here happens
*beneath a directory file descriptor of the root*, and the kernel (or a careful walk) refuses
anything that would leave it:

* ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` where the kernel
  has it (Linux >= 5.6), called through ``syscall(2)``;
* otherwise (or with ``NORMA_CONFINE=walk``) a walk one component at a time from the root
  fd, each directory opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the previous one
  and the leaf with ``O_NOFOLLOW``.

Symlinks. ``locate`` resolves the spelled path (``~``, relative to the cwd, ``..`` and
symlinks) exactly as the permission engine does, so the tool opens the very path that was
judged. A symlink inside a root that points inside the root is therefore followed — up front,
by resolution. The open itself then follows *no* symlinks, with either mechanism: a resolved
path contains none, so one met during the open was swapped in after the check and the open
is refused. Both mechanisms behave the same, which keeps the tests honest on every kernel.

Roots. A path is opened beneath the deepest working root (``ctx.roots``) that contains it. A
path in no root is opened only if ``ctx.session.extra_roots`` (absolute paths the runtime
derives from explicit allow rules naming them) contains it: beneath that path when it is a
directory, else beneath its parent, leaf only. Anything else is refused.

Hard links and bind mounts inside a root are not detected: confinement is about names.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from norma_cli.core.contract import path_inside
from norma_cli.core.record import record
from norma_cli.errors import NormaError

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext

Method = Literal["openat2", "walk"]

# openat2 is 437 on every architecture that uses the unified syscall table (all since 5.1).
_OPENAT2_NR = 437
_OPENAT2_MACHINES = {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x"}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_O_PATH = getattr(os, "O_PATH", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_probe_lock = threading.Lock()
_openat2_ok: bool | None = None


class ConfinementError(NormaError):
    """A path that lies outside every root, or an open that would leave its root."""


@record(frozen=True)
class Location:
    """Where a spelled path lives: its resolved form and the root it is opened beneath."""

    path: Path  # absolute, normalised, symlinks resolved (what the permission engine judged)
    root: Path  # the directory the open happens beneath
    rel: str  # ``path`` relative to ``root``; "." for the root itself


# ----------------------------------------------------------------------------- locating
def allowed_roots(ctx: CallContext) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The working roots and the extra roots the runtime granted through allow rules."""
    extra = getattr(ctx.session, "extra_roots", None) or ()  # resolved by the runtime
    return tuple(ctx.roots), tuple(Path(p) for p in extra)


def locate(raw: str, ctx: CallContext) -> Location:
    """Resolve ``raw`` like the permission engine and pick the root to open it beneath."""
    from norma_cli.core.permission import resolve_path

    if not raw:
        raise ConfinementError("empty path")
    if "\x00" in raw:
        raise ConfinementError("path contains a NUL byte")
    resolved = resolve_path(raw, ctx)
    text = str(resolved)
    roots, extra = allowed_roots(ctx)
    inside = [r for r in roots if path_inside(text, (r,))]
    if inside:
        root = max(inside, key=lambda r: len(str(r)))
        return Location(resolved, root, _rel(text, str(root)))
    for granted in extra:
        if resolved == granted:
            if os.path.isdir(granted):
                return Location(resolved, granted, ".")
            return Location(resolved, granted.parent, granted.name)
        if path_inside(text, (granted,)):
            return Location(resolved, granted, _rel(text, str(granted)))
    spelled = f"{raw} (resolves to {resolved})" if str(resolved) != raw else raw
    names = ", ".join(str(r) for r in roots) or "none"
    raise ConfinementError(
        f"{spelled} is outside the working roots ({names}); "
        "a path outside them needs an allow rule naming it"
    )


def _rel(path: str, root: str) -> str:
    if path == root:
        return "."
    rel = path[len(root) :].lstrip("/")
    return rel or "."


# ----------------------------------------------------------------------------- opening
def openat2_available() -> bool:
    """Whether this kernel (and seccomp policy) lets us call openat2; probed once.

    ``NORMA_CONFINE=walk`` forces the portable walk (for kernels whose openat2 misbehaves,
    and so the tests can exercise both mechanisms on one machine).
    """
    global _openat2_ok
    if os.environ.get("NORMA_CONFINE") == "walk":
        return False
    if _openat2_ok is not None:
        return _openat2_ok
    with _probe_lock:
        if _openat2_ok is None:
            _openat2_ok = _probe_openat2()
    return _openat2_ok


def _probe_openat2() -> bool:
    if not sys.platform.startswith("linux") or os.uname().machine.lower() not in _OPENAT2_MACHINES:
        return False
    try:
        fd = _openat2(
            os.open("/", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC),
            ".",
            os.O_RDONLY | _O_DIRECTORY,
            0,
            close_dir=True,
        )
    except OSError:
        return False  # ENOSYS (old kernel), EPERM (seccomp), ...
    os.close(fd)
    return True


_libc: ctypes.CDLL | None = None
_HOW_SIZE = ctypes.c_size_t(24)  # sizeof(struct open_how)
_NR = ctypes.c_long(_OPENAT2_NR)
# open_how buffers by (flags, mode): a Read builds the same one every call
_hows: dict[tuple[int, int], ctypes.Array[ctypes.c_char]] = {}


def _how(flags: int, mode: int) -> ctypes.Array[ctypes.c_char]:
    key = (flags, mode)
    buf = _hows.get(key)
    if buf is None:
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
        # struct open_how { u64 flags; u64 mode; u64 resolve; }; mode must be 0 without O_CREAT
        how = struct.pack("QQQ", flags | _O_CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
        buf = ctypes.create_string_buffer(how, len(how))  # the kernel only reads it
        if len(_hows) < 64:
            _hows[key] = buf
    return buf


def _openat2(dir_fd: int, rel: str, flags: int, mode: int, *, close_dir: bool = False) -> int:
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.syscall.restype = ctypes.c_long
        buf = _how(flags, mode)
        path = ctypes.c_char_p(os.fsencode(rel))
        for _ in range(16):  # EAGAIN: a concurrent rename raced the lookup; try again
            fd = _libc.syscall(_NR, ctypes.c_long(dir_fd), path, buf, _HOW_SIZE)
            if fd >= 0:
                return int(fd)
            err = ctypes.get_errno()
            if err not in (errno.EAGAIN, errno.EINTR):
                raise OSError(err, os.strerror(err), rel)
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), rel)
    finally:
        if close_dir:
            os.close(dir_fd)


def open_beneath(
    root_fd: int, rel: str, flags: int, mode: int = 0o666, *, method: Method | None = None
) -> int:
    """Open ``rel`` beneath the directory ``root_fd``, following no symlink on the way.

    ``rel`` is a relative path without ``..``. Raises ``ConfinementError`` when the open would
    leave the root or meets a symlink, ``OSError`` for ordinary failures (missing file, ...).
    ``method`` forces a mechanism (tests exercise both); by default openat2 when available.
    """
    parts = _parts(rel)
    method = method or ("openat2" if openat2_available() else "walk")
    if method == "openat2":
        try:
            return _openat2(root_fd, "/".join(parts) or ".", flags, mode)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise ConfinementError(f"{rel}: refused, the open would leave the root") from None
            if exc.errno == errno.ELOOP:
                raise ConfinementError(
                    f"{rel}: refused, a symbolic link appeared in the path during the call"
                ) from None
            raise
    return _walk(root_fd, parts, flags, mode)


def _parts(rel: str) -> list[str]:
    if rel.startswith("/") or "\x00" in rel:
        raise ConfinementError(f"{rel}: refused, not a relative path")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ConfinementError(f"{rel}: refused, '..' may not appear in a confined path")
    return parts


def _walk(root_fd: int, parts: list[str], flags: int, mode: int) -> int:
    if not parts:
        return os.open(".", flags | _O_CLOEXEC, mode, dir_fd=root_fd)
    cur = root_fd
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                nxt = os.open(
                    name,
                    (_O_PATH or os.O_RDONLY) | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC,
                    dir_fd=cur,
                )
            except OSError as exc:
                _refuse_if_link(cur, name, "/".join(parts[: i + 1]), exc)
                raise
            if cur != root_fd:
                os.close(cur)
            cur = nxt
        try:
            return os.open(parts[-1], flags | _O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=cur)
        except OSError as exc:
            _refuse_if_link(cur, parts[-1], "/".join(parts), exc)
            raise
    finally:
        if cur != root_fd:
            os.close(cur)


def _refuse_if_link(dir_fd: int, name: str, shown: str, exc: OSError) -> None:
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
        return
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ConfinementError(
            f"{shown}: refused, a symbolic link appeared in the path during the call"
        ) from None


@contextmanager
def root_fd(root: Path) -> Iterator[int]:
    """A directory fd for a root (roots are trusted, already-resolved configuration)."""
    fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def open_location(loc: Location, flags: int, mode: int = 0o666) -> int:
    """Open a located path beneath its root. The caller owns (and closes) the fd."""
    rfd = os.open(loc.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)  # root_fd, inlined: hot
    try:
        return open_beneath(rfd, loc.rel, flags, mode)
    finally:
        os.close(rfd)


def open_parent(loc: Location, *, create: bool = False) -> tuple[int, str]:
    """A readable directory fd of ``loc``'s parent (beneath the root) and the leaf name.

    With ``create`` missing parent directories are made, each one with ``mkdir`` relative to
    the confined fd of the directory above it.
    """
    parts = _parts(loc.rel)
    if not parts:
        raise ConfinementError(f"{loc.path}: is a working root itself, not a file in it")
    leaf = parts[-1]
    dirflags = os.O_RDONLY | _O_DIRECTORY
    with root_fd(loc.root) as rfd:
        try:
            return open_beneath(rfd, "/".join(parts[:-1]) or ".", dirflags), leaf
        except FileNotFoundError:
            if not create:
                raise
        fd = os.dup(rfd)
        try:
            for i, name in enumerate(parts[:-1]):
                prefix = "/".join(parts[: i + 1])
                try:
                    nxt = open_beneath(rfd, prefix, dirflags)
                except FileNotFoundError:
                    try:
                        os.mkdir(name, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass  # made concurrently; the confined open below still checks it
                    nxt = open_beneath(rfd, prefix, dirflags)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd, leaf


__all__ = [
    "ConfinementError",
    "Location",
    "allowed_roots",
    "locate",
    "open_beneath",
    "open_location",
    "open_parent",
    "openat2_available",
    "root_fd",
]
