"""Files a user names on the command line (``-i @FILE``, ``--calls FILE``, ``tools lint FILE``,
``policy replay FILE``, ``--schema @FILE``): read whole, but never forever.

A regular file, a fifo (so ``<(...)`` works) or ``-`` for stdin is read up to ``MAX_BYTES``; a
device (``/dev/zero`` would be read until memory runs out), a directory or a socket is refused,
and so is anything larger than the cap. Every failure is a ``UsageError``: one line, exit 2.
"""

from __future__ import annotations

import os
import stat
import sys

from norma_cli.errors import UsageError

MAX_BYTES = 256 * 1024 * 1024  # far above any calls file, schema set or transcript seen


class UserFileError(UsageError):
    """A named file that cannot be read; ``reason`` is the part after the file's name."""

    def __init__(self, what: str, spec: str, reason: str) -> None:
        where = "stdin" if spec == "-" else spec
        super().__init__(f"cannot read {what} {where}: {reason}")
        self.reason = reason


def read_bytes(spec: str, what: str) -> bytes:
    """The bytes of the file ``spec`` names (``-`` is stdin); ``what`` names it in errors."""
    if spec == "-":
        if sys.stdin is None:
            raise UserFileError(what, spec, "stdin is closed")
        return _bounded(sys.stdin.buffer, what, spec)
    try:
        fd = os.open(spec, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise UserFileError(what, spec, _reason(exc)) from None
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind and kind != "a named pipe":  # a fifo is read: `<(...)` works
            raise UserFileError(what, spec, f"is {kind}, not a file")
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as fh:
            return _bounded(fh, what, spec)
    finally:
        os.close(fd)


def read_text(spec: str, what: str) -> str:
    """``read_bytes`` as UTF-8 text (a byte-order mark is dropped)."""
    data = read_bytes(spec, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserFileError(what, spec, f"not UTF-8 text (byte {exc.start:,})") from None


def _reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return exc.strerror or str(exc)


def file_kind(mode: int) -> str:
    """What a file is when it is not a regular file ("" for a regular file)."""
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "an unusual file"


def _bounded(fh: object, what: str, spec: str) -> bytes:
    read = fh.read  # type: ignore[attr-defined]
    chunks: list[bytes] = []
    total = 0
    try:
        while True:
            chunk = read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_BYTES:
                raise UserFileError(what, spec, f"larger than {MAX_BYTES >> 20} MiB")
            chunks.append(chunk)
    except OSError as exc:
        raise UserFileError(what, spec, _reason(exc)) from None
    return b"".join(chunks)
