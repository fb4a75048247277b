"""The built-in file tools: Read, Write, Edit, MultiEdit, LS, Glob (SPEC §6).

Every open goes through ``confine``: the path is resolved like the permission engine resolves
it, then opened beneath a directory fd of its root, so a symlink swapped in mid-call cannot
lead outside. Writes are atomic: a temp file in the confined parent directory, fsync, then a
rename relative to that same directory fd.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

from norma_cli.core.contract import CallContext, ContentBlock, Tool, ToolOutput, object_schema
from norma_cli.core.record import record
from norma_cli.errors import NormaError
from norma_cli.policy.filescope import read_filter
from norma_cli.tools.confine import (
    ConfinementError,
    Location,
    locate,
    open_beneath,
    open_location,
    open_parent,
)

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
MAX_READ_BYTES = 10 * 1024 * 1024  # whole-file reads above this need offset/limit
MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_EDIT_BYTES = 10 * 1024 * 1024
SNIFF_BYTES = 8192
MAX_LS_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
MAX_GLOB_VISITS = 200_000
VCS_DIRS = frozenset({".git", ".hg", ".svn", ".bzr", "_darcs", ".jj", "CVS"})

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class FileToolError(NormaError):
    """A file tool refusing or failing, with a message meant for the model."""


_FILE_PATH = {
    "type": "string",
    "minLength": 1,
    "description": "Path of the file: absolute, or relative to the working directory.",
}


class FileTool(Tool):
    """Shared plumbing: one path input, errors turned into error results."""

    path_key = "file_path"

    def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
        value = tool_input.get(self.path_key)
        return [value] if isinstance(value, str) else []

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        try:
            return self.run(tool_input, ctx)
        except NormaError as exc:
            return ToolOutput.error(str(exc))
        except OSError as exc:
            return ToolOutput.error(_os_message(tool_input.get(self.path_key) or ".", exc))

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        raise NotImplementedError


def _os_message(raw: str, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{raw}: file does not exist"
    if isinstance(exc, IsADirectoryError):
        return f"{raw}: is a directory"
    if isinstance(exc, NotADirectoryError):
        return f"{raw}: a component of the path is not a directory"
    if isinstance(exc, PermissionError):
        return f"{raw}: permission denied"
    return f"{raw}: {exc.strerror or exc}"


# ----------------------------------------------------------------------------- reading
def _open_regular(loc: Location, raw: str) -> tuple[int, os.stat_result]:
    """A read-only fd of the regular file at ``loc``; anything else is refused.

    Opening a device can act (a watchdog starts counting, a tape rewinds), so what is at the
    path is looked at first, without following it, and a device, FIFO or socket is refused
    unopened. The ``fstat`` of the confined fd decides: it sees what was really opened.
    O_NONBLOCK: neither the open nor a read waits (a FIFO swapped in, ``/proc/kmsg``).
    """
    try:
        mode = os.lstat(loc.path).st_mode
    except OSError:
        pass  # missing or unreadable: the confined open below says which
    else:
        if not stat.S_ISREG(mode):
            _refuse_special(mode, raw)
    fd = open_location(loc, os.O_RDONLY | _O_NONBLOCK)
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        return fd, st
    os.close(fd)
    _refuse_special(st.st_mode, raw)
    raise FileToolError(f"{raw}: not a regular file")  # pragma: no cover - refused above


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_special(mode: int, raw: str) -> None:
    """Raise unless ``mode`` is a regular file's (or a symlink's: the confined open refuses
    one met where the resolved path had none)."""
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    if stat.S_ISDIR(mode):
        raise FileToolError(f"{raw}: is a directory; use LS to list it")
    kind = next((name for test, name in _KINDS if test(mode)), "special")
    raise FileToolError(f"{raw}: not a regular file ({kind}); file tools touch regular files only")


def _read_upto(fh: BinaryIO, n: int, raw: str) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the file); never waits for more."""
    try:
        data = fh.read(n)
    except BlockingIOError:
        data = None
    if data is None:  # the fd is non-blocking and the file has nothing to give right now
        raise _would_block(raw)
    return data


def _would_block(raw: str) -> FileToolError:
    return FileToolError(f"{raw}: has no data to read without waiting; Read does not wait")


_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(head: bytes) -> str | None:
    """The media type of an image recognised by its magic bytes, else None."""
    for magic, media in _IMAGE_MAGIC:
        if head.startswith(magic):
            return media
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _numbered(n: int, line: str) -> str:
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + f"… [line truncated at {MAX_LINE_CHARS} characters]"
    return f"{n:>6}\t{line}"


def _lines(fh: BinaryIO) -> Iterator[str]:
    """Decoded lines without their endings, never holding more than a bounded piece of one.

    A line longer than MAX_LINE_CHARS is cut (with one extra char kept so the caller knows
    to mark it) and the rest of it skipped in chunks.
    """
    cap = MAX_LINE_CHARS * 4 + 4  # enough bytes for MAX_LINE_CHARS + 1 UTF-8 characters
    while True:
        chunk = fh.readline(cap)
        if not chunk:
            return
        if not chunk.endswith(b"\n") and len(chunk) == cap:
            while True:  # skip the rest of an overlong line
                rest = fh.readline(65536)
                if not rest or rest.endswith(b"\n"):
                    break
        text = chunk.decode("utf-8", "replace").rstrip("\n").removesuffix("\r")
        yield text[: MAX_LINE_CHARS + 1]


class ReadTool(FileTool):
    name = "Read"
    description = (
        "Read a file from the working roots. Text comes back numbered like `cat -n` "
        f"(line number, tab, line); at most {DEFAULT_READ_LINES} lines per call unless `limit` "
        f"says otherwise, lines longer than {MAX_LINE_CHARS} characters are cut. PNG, JPEG, GIF "
        "and WebP images come back as images. Binary files are refused."
    )
    prompt = (
        "Use Read to look at a file before you change it. `file_path` may be absolute or "
        "relative to the working directory. For a long file pass `offset` (the 1-based line to "
        "start at) and `limit` (how many lines) to read it in pieces; files over "
        f"{MAX_READ_BYTES // (1024 * 1024)} MB must be read that way. The line numbers are not "
        "part of the file: never copy them into an Edit."
    )
    input_schema = object_schema(
        {
            "file_path": _FILE_PATH,
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "1-based line number to start reading at (0 or 1: the first line).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"Number of lines to read (default {DEFAULT_READ_LINES}).",
            },
        },
        ["file_path"],
    )
    read_only = True
    concurrency_safe = True
    requires_approval = False

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        raw = tool_input["file_path"]
        offset = tool_input.get("offset")
        limit = tool_input.get("limit")
        loc = locate(raw, ctx)
        fd, st = _open_regular(loc, raw)
        whole = offset is None and limit is None
        with os.fdopen(fd, "rb") as fh:
            try:
                head = fh.read(SNIFF_BYTES)  # inline, not _read_upto: the hot path of Read
            except BlockingIOError:
                head = None
            if head is None:
                raise _would_block(raw)
            media = image_type(head)
            if media is not None:
                return self._image(fh, head, st, media, loc)
            if b"\x00" in head:
                raise FileToolError(
                    f"{raw}: appears to be a binary file; Read shows text and images only"
                )
            if not head:
                return ToolOutput.text(
                    f"{loc.path} is empty (0 bytes).", path=str(loc.path), lines=0
                )
            src: BinaryIO = fh
            if st.st_size == 0:
                # procfs, sysfs and the like say 0 whatever they hold: read to find out, up
                # to the limit for a whole file
                data = head + _read_upto(fh, MAX_READ_BYTES + 1 - len(head), raw)
                if len(data) <= MAX_READ_BYTES:
                    src = io.BytesIO(data)
                elif whole:
                    raise FileToolError(
                        f"{raw} reports no size and holds over {MAX_READ_BYTES:,} bytes, the "
                        "limit for reading a whole file; pass offset and limit to read it in pieces"
                    )
            elif st.st_size > MAX_READ_BYTES and whole:
                raise FileToolError(
                    f"{raw} is {st.st_size:,} bytes, over the {MAX_READ_BYTES:,}-byte limit for "
                    "reading a whole file; pass offset and limit to read it in pieces"
                )
            src.seek(0)
            return self._text(src, loc, max(1, offset or 1), limit or DEFAULT_READ_LINES)

    def _text(self, fh: BinaryIO, loc: Location, start: int, limit: int) -> ToolOutput:
        out: list[str] = []
        n = 0
        more = False
        for n, line in enumerate(_lines(fh), start=1):
            if n < start:
                continue
            if len(out) >= limit:
                more = True
                break
            out.append(_numbered(n, line))
        if not out:
            return ToolOutput.text(
                f"{loc.path} has {n} line{'s' if n != 1 else ''}; offset {start} is past the end.",
                path=str(loc.path),
                lines=0,
            )
        last = start + len(out) - 1
        text = "\n".join(out)
        if more:
            text += f"\n\n[showing lines {start}-{last}; more lines follow: read on with offset={last + 1}]"
        return ToolOutput.text(
            text, path=str(loc.path), first_line=start, last_line=last, more=more
        )

    def _image(
        self, fh: BinaryIO, head: bytes, st: os.stat_result, media: str, loc: Location
    ) -> ToolOutput:
        import base64

        if st.st_size > MAX_IMAGE_BYTES:
            raise FileToolError(
                f"{loc.path}: image of {st.st_size:,} bytes is over the {MAX_IMAGE_BYTES:,}-byte limit"
            )
        data = head + _read_upto(fh, MAX_IMAGE_BYTES + 1 - len(head), str(loc.path))
        if len(data) > MAX_IMAGE_BYTES:  # it reported a smaller size (or none)
            raise FileToolError(
                f"{loc.path}: image of over {MAX_IMAGE_BYTES:,} bytes is over the limit"
            )
        block = ContentBlock("image", data=base64.b64encode(data).decode("ascii"), media_type=media)
        return ToolOutput(
            [block], metadata={"path": str(loc.path), "media_type": media, "bytes": len(data)}
        )


# ----------------------------------------------------------------------------- writing
def write_atomic(loc: Location, data: bytes) -> bool:
    """Replace ``loc`` with ``data`` atomically, beneath its root. True if the file existed.

    The temp file is created with ``openat`` in the confined parent directory fd and renamed
    relative to that same fd, so no path is looked up again after the confined open. An
    existing file keeps its mode (and owner, where we may set it).

    Only a regular file is replaced: what is at the leaf is looked at (``fstatat`` on the
    confined parent fd, not following a symlink) before anything is created, and a directory,
    FIFO, socket or device node is refused and left alone. A rename cannot be made to depend
    on what it replaces, so an entry swapped in between that look and the rename is replaced;
    only a writer of the directory can do that, to an entry of its own making (a device node
    there needs root), and the new file stays beneath the root all the same.
    """
    parent, leaf = open_parent(loc, create=True)
    tmp = f".{leaf[:200]}.norma-{os.urandom(6).hex()}.tmp"
    try:
        try:
            old: os.stat_result | None = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISLNK(old.st_mode):
            raise ConfinementError(
                f"{loc.path}: refused, it became a symbolic link during the call"
            )
        if old is not None and not stat.S_ISREG(old.st_mode):
            # a rename would put a regular file in place of a FIFO, a socket or a device
            # node (as root, /dev/full), and cannot replace a directory
            if stat.S_ISDIR(old.st_mode):
                raise FileToolError(f"{loc.path}: is a directory")
            _refuse_special(old.st_mode, str(loc.path))
        fd = open_beneath(parent, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                if old is not None:
                    os.fchmod(fh.fileno(), stat.S_IMODE(old.st_mode))
                    _keep_owner(fh.fileno(), old)
                os.fsync(fh.fileno())
            os.replace(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=parent)
            except OSError:
                pass
            raise
        try:
            os.fsync(parent)  # make the rename itself durable
        except OSError:
            pass
        return old is not None
    finally:
        os.close(parent)


def _keep_owner(fd: int, old: os.stat_result) -> None:
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (old.st_uid, old.st_gid):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:
            pass  # not ours to give away; the new file keeps the writer's owner


class WriteTool(FileTool):
    name = "Write"
    description = (
        "Write a file inside the working roots, replacing it if it exists. The write is atomic "
        "(temp file + rename) and missing parent directories are created."
    )
    prompt = (
        "Use Write to create a new file or to replace a file's whole content. To change part of "
        "an existing file prefer Edit or MultiEdit, after reading it with Read. `content` is the "
        "complete new file, written as UTF-8 exactly as given."
    )
    input_schema = object_schema(
        {
            "file_path": _FILE_PATH,
            "content": {"type": "string", "description": "The complete content of the file."},
        },
        ["file_path", "content"],
    )
    read_only = False
    concurrency_safe = False
    requires_approval = True
    edits_files = True

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        loc = locate(tool_input["file_path"], ctx)
        data = tool_input["content"].encode("utf-8", "surrogateescape")
        existed = write_atomic(loc, data)
        verb = "Updated" if existed else "Created"
        return ToolOutput.text(
            f"{verb} {loc.path} ({len(data):,} bytes).",
            path=str(loc.path),
            bytes=len(data),
            created=not existed,
        )


# ----------------------------------------------------------------------------- editing
@record(frozen=True)
class EditSpec:
    old_string: str
    new_string: str
    replace_all: bool = False


@record
class Applied:
    content: str
    replacements: int
    first_index: int  # where the first replacement starts in the new content
    new_length: int


def apply_edit(content: str, edit: EditSpec, shown: str) -> Applied:
    """One exact-string replacement with the uniqueness rules of Edit; raises on a bad edit."""
    old, new = edit.old_string, edit.new_string
    if old == new:
        raise FileToolError("old_string and new_string are the same; nothing would change")
    if old == "":
        if content:
            raise FileToolError(
                f"old_string is empty but {shown} is not; give the text to replace, or use Write"
            )
        return Applied(new, 1, 0, len(new))
    count = content.count(old)
    if count == 0 and "\r\n" in content and "\n" in old and "\r\n" not in old:
        # The model usually sends \n line endings for a CRLF file: match it the file's way.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = content.count(old)
    if count == 0:
        raise FileToolError(f"old_string not found in {shown}")
    if count > 1 and not edit.replace_all:
        raise FileToolError(
            f"old_string found {count} times in {shown}; use replace_all to change every one, "
            "or add surrounding context to make it unique"
        )
    first = content.index(old)
    if edit.replace_all:
        result = content.replace(old, new)
    else:
        result = content[:first] + new + content[first + len(old) :]
        count = 1
    return Applied(result, count, first, len(new))


def _read_for_edit(loc: Location, raw: str) -> str | None:
    """The current text of the file, or None if it does not exist."""
    try:
        fd, st = _open_regular(loc, raw)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_EDIT_BYTES:
            raise FileToolError(
                f"{raw} is {st.st_size:,} bytes, too large to edit (limit {MAX_EDIT_BYTES:,})"
            )
        data = _read_upto(fh, MAX_EDIT_BYTES + 1, raw)
    if len(data) > MAX_EDIT_BYTES:  # it reported a smaller size (or none, like procfs)
        raise FileToolError(f"{raw} holds over {MAX_EDIT_BYTES:,} bytes, too large to edit")
    if b"\x00" in data[:SNIFF_BYTES]:
        raise FileToolError(f"{raw}: appears to be a binary file; Edit changes text files only")
    # surrogateescape: bytes that are not UTF-8 survive the round trip unchanged
    return data.decode("utf-8", "surrogateescape")


def _snippet(content: str, index: int, length: int, context: int = 3, max_lines: int = 40) -> str:
    first = content.count("\n", 0, index) + 1
    last = first + content.count("\n", index, index + length)
    lines = content.split("\n")
    lo, hi = max(1, first - context), min(len(lines), last + context, first - context + max_lines)
    clean = [
        _numbered(n, lines[n - 1].encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        for n in range(lo, hi + 1)
    ]
    return "\n".join(clean)


def _edit_file(
    tool_input: dict[str, Any], ctx: CallContext, edits: list[EditSpec], multi: bool
) -> ToolOutput:
    raw = tool_input["file_path"]
    loc = locate(raw, ctx)
    content = _read_for_edit(loc, raw)
    creating = content is None
    if creating and edits[0].old_string != "":
        raise FileToolError(
            f"{raw}: file does not exist (to create it, use Write or an empty old_string)"
        )
    text = content or ""
    total = 0
    applied: Applied | None = None
    for i, edit in enumerate(edits, start=1):
        try:
            applied = apply_edit(text, edit, raw)
        except FileToolError as exc:
            if not multi:
                raise
            raise FileToolError(f"edit {i} of {len(edits)}: {exc}; no edit was applied") from None
        text = applied.content
        total += applied.replacements
    assert applied is not None
    write_atomic(loc, text.encode("utf-8", "surrogateescape"))
    what = "Created" if creating else "Edited"
    count = (
        f"{len(edits)} edits, {total} replacement{'s' if total != 1 else ''}"
        if multi
        else (f"{total} replacement{'s' if total != 1 else ''}")
    )
    summary = f"{what} {loc.path} ({count})."
    if not multi:
        summary += " The changed region now reads:\n" + _snippet(
            text, applied.first_index, applied.new_length
        )
    return ToolOutput.text(summary, path=str(loc.path), replacements=total, created=creating)


_REPLACE_ALL = {
    "type": "boolean",
    "default": False,
    "description": "Replace every occurrence of old_string (default: it must occur exactly once).",
}


class EditTool(FileTool):
    name = "Edit"
    description = (
        "Replace an exact string in a file inside the working roots. old_string must occur "
        "exactly once unless replace_all is true. The file is written atomically."
    )
    prompt = (
        "Read the file first. Copy old_string exactly from the file, with its indentation and "
        "without the line-number prefix Read shows; include enough surrounding lines to make it "
        "unique, or set replace_all to change every occurrence (e.g. renaming). An empty "
        "old_string creates a file that does not exist yet."
    )
    input_schema = object_schema(
        {
            "file_path": _FILE_PATH,
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": _REPLACE_ALL,
        },
        ["file_path", "old_string", "new_string"],
    )
    read_only = False
    concurrency_safe = False
    requires_approval = True
    edits_files = True

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        edit = EditSpec(
            tool_input["old_string"], tool_input["new_string"], bool(tool_input.get("replace_all"))
        )
        return _edit_file(tool_input, ctx, [edit], multi=False)


class MultiEditTool(FileTool):
    name = "MultiEdit"
    description = (
        "Apply several exact-string replacements to one file, in order, all or nothing: if any "
        "edit fails none is written. The file is written once, atomically."
    )
    prompt = (
        "Use MultiEdit for several changes to the same file. Each edit works on the text left "
        "by the edits before it, with the rules of Edit: old_string must occur exactly once "
        "unless replace_all is true, and must differ from new_string."
    )
    input_schema = object_schema(
        {
            "file_path": _FILE_PATH,
            "edits": {
                "type": "array",
                "minItems": 1,
                "description": "The edits, applied in sequence.",
                "items": {
                    "type": "object",
                    "properties": {
                        "old_string": {
                            "type": "string",
                            "description": "The exact text to replace.",
                        },
                        "new_string": {
                            "type": "string",
                            "description": "The text to put in its place.",
                        },
                        "replace_all": _REPLACE_ALL,
                    },
                    "required": ["old_string", "new_string"],
                    "additionalProperties": False,
                },
            },
        },
        ["file_path", "edits"],
    )
    read_only = False
    concurrency_safe = False
    requires_approval = True
    edits_files = True

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        edits = [
            EditSpec(e["old_string"], e["new_string"], bool(e.get("replace_all")))
            for e in tool_input["edits"]
        ]
        return _edit_file(tool_input, ctx, edits, multi=True)


# ----------------------------------------------------------------------------- listing
def _open_dir(loc: Location, raw: str) -> int:
    try:
        return open_location(loc, os.O_RDONLY | _O_DIRECTORY)
    except NotADirectoryError:
        raise FileToolError(f"{raw}: not a directory") from None


class LSTool(FileTool):
    name = "LS"
    path_key = "path"
    description = (
        "List the entries of a directory inside the working roots, sorted by name; directories "
        "end with '/', symbolic links show their target."
    )
    prompt = (
        "Use LS to see what a directory holds. `ignore` takes glob patterns (like '*.pyc' or "
        "'node_modules') matched against entry names. To find files by name across a tree, "
        "use Glob instead."
    )
    input_schema = object_schema(
        {
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "Directory to list: absolute, or relative to the working directory.",
            },
            "ignore": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "description": "Glob patterns of entry names to leave out.",
            },
        },
        ["path"],
    )
    read_only = True
    concurrency_safe = True
    requires_approval = False

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        import fnmatch

        raw = tool_input["path"]
        ignore = list(tool_input.get("ignore") or [])
        loc = locate(raw, ctx)
        fd = _open_dir(loc, raw)
        hide = read_filter(ctx)
        entries: list[str] = []
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    if any(fnmatch.fnmatchcase(entry.name, pat) for pat in ignore):
                        continue
                    if hide is not None and hide.hides(str(loc.path / entry.name), ctx):
                        continue  # a Read deny/ask rule protects it
                    entries.append(_describe(entry, fd))
        finally:
            os.close(fd)
        entries.sort()
        total = len(entries)
        if not entries:
            return ToolOutput.text(f"{loc.path}/ is empty.", path=str(loc.path), entries=0)
        shown = entries[:MAX_LS_ENTRIES]
        text = f"{loc.path}/\n" + "\n".join(f"  {e}" for e in shown)
        if total > len(shown):
            text += f"\n\n[showing {len(shown)} of {total} entries; use Glob or a narrower path]"
        return ToolOutput.text(text, path=str(loc.path), entries=total)


def _describe(entry: os.DirEntry[str], dir_fd: int) -> str:
    try:
        if entry.is_symlink():
            return f"{entry.name} -> {os.readlink(entry.name, dir_fd=dir_fd)}"
        if entry.is_dir(follow_symlinks=False):
            return entry.name + "/"
    except OSError:
        pass
    return entry.name


# ----------------------------------------------------------------------------- glob
_MAGIC = re.compile(r"[*?\[{]")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob (``*``, ``?``, ``[...]``, ``{a,b}``, ``**`` for any depth) to a regex.

    Matching is against '/'-separated paths relative to the search directory. ``*`` matches
    within one path segment (dotfiles included); ``**`` as a whole segment matches zero or
    more directories.
    """
    from norma_cli.core.globs import GLOB_TOOL, glob_to_regex  # only Glob pays the import

    try:
        return re.compile(glob_to_regex(pattern, GLOB_TOOL), re.DOTALL)
    except re.error as e:  # '[z-a]': the model gets a plain tool error
        raise FileToolError(f"invalid glob pattern {pattern!r}: {e.msg}") from None


def split_glob(path: str, pattern: str) -> tuple[str, str]:
    """Move the literal leading directories of ``pattern`` onto ``path``.

    ``("." , "src/**/*.py")`` → ``("./src", "**/*.py")``; an absolute pattern replaces the path.
    The search directory is then confined like any other path.
    """
    segments = pattern.split("/")
    k = 0
    while k < len(segments) - 1 and not _MAGIC.search(segments[k]):
        k += 1
    base = "/".join(segments[:k])
    rest = "/".join(segments[k:])
    if pattern.startswith("/"):
        return base or "/", rest
    return (os.path.join(path, base) if base else path), rest


class GlobTool(FileTool):
    name = "Glob"
    path_key = "path"
    description = (
        "Find files by glob pattern (e.g. '**/*.py', 'src/**/*.{ts,tsx}') inside the working "
        f"roots. Returns matching file paths, newest first, at most {MAX_GLOB_RESULTS}. "
        "Version-control directories (.git, .hg, .svn, ...) are skipped."
    )
    prompt = (
        "Use Glob to find files by name. `*` matches within one directory level, `**` any "
        "number of levels, `{a,b}` either alternative: '*.py' finds Python files directly in "
        "the search directory, '**/*.py' in every subdirectory too. `path` is the directory to "
        "search (default: the working directory). Symbolic links to directories are not "
        "followed. To search file contents use Grep."
    )
    input_schema = object_schema(
        {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "The glob pattern to match.",
            },
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "Directory to search in (default: the working directory).",
            },
        },
        ["pattern"],
    )
    read_only = True
    concurrency_safe = True
    requires_approval = False

    def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
        path = tool_input.get("path") or "."
        pattern = tool_input.get("pattern")
        paths = [path]
        if isinstance(pattern, str):
            base, _ = split_glob(path, pattern)
            if base != path and (pattern.startswith("/") or ".." in pattern.split("/")):
                paths.append(base)  # the pattern itself leads elsewhere: judge that too
        return paths

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        raw = tool_input.get("path") or "."
        base, rest = split_glob(raw, tool_input["pattern"])
        if ".." in rest.split("/"):
            raise FileToolError("'..' is only allowed in the leading literal part of a pattern")
        regex = glob_regex(rest)
        depth = None if "**" in rest else rest.count("/") + 1
        loc = locate(base, ctx)
        fd = _open_dir(loc, base)
        hide = read_filter(ctx)
        found: list[tuple[float, str]] = []
        visited = 0
        truncated_walk = False
        try:
            stack: list[tuple[int, str, int]] = [(fd, "", 1)]
            fd = -1  # now owned by the stack
            while stack:
                dfd, prefix, level = stack.pop()
                try:
                    with os.scandir(dfd) as it:
                        entries = list(it)
                    for entry in entries:
                        visited += 1
                        if visited > MAX_GLOB_VISITS:
                            truncated_walk = True
                            break
                        rel = prefix + entry.name
                        if hide is not None and hide.hides(str(loc.path / rel), ctx):
                            continue  # a Read deny/ask rule protects it (and all beneath)
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                            if is_dir:
                                if entry.name in VCS_DIRS or (depth is not None and level >= depth):
                                    continue
                                sub = _open_subdir(dfd, entry.name)
                                if sub is not None:
                                    stack.append((sub, rel + "/", level + 1))
                                continue
                            if regex.fullmatch(rel):
                                mtime = entry.stat(follow_symlinks=False).st_mtime
                                found.append((mtime, rel))
                        except OSError:
                            continue  # vanished or unreadable while we looked
                finally:
                    os.close(dfd)
                if truncated_walk:
                    break
        finally:
            for dfd, _, _ in stack:
                os.close(dfd)
            if fd >= 0:
                os.close(fd)
        found.sort(key=lambda item: (-item[0], item[1]))
        total = len(found)
        if not found:
            note = (
                f" (stopped after visiting {MAX_GLOB_VISITS:,} entries)" if truncated_walk else ""
            )
            return ToolOutput.text(f"No files found{note}.", path=str(loc.path), matches=0)
        shown = [str(loc.path / rel) for _, rel in found[:MAX_GLOB_RESULTS]]
        text = "\n".join(shown)
        if total > len(shown):
            text += f"\n\n[showing the {len(shown)} newest of {total} matches; narrow the pattern or path]"
        if truncated_walk:
            text += f"\n\n[search stopped after visiting {MAX_GLOB_VISITS:,} entries; narrow the pattern or path]"
        return ToolOutput.text(
            text, path=str(loc.path), matches=total, truncated=total > len(shown) or truncated_walk
        )


def _open_subdir(dir_fd: int, name: str) -> int | None:
    try:
        return os.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.ENOENT):
            return None  # became a symlink, vanished, or unreadable: not part of the tree
        raise


FILE_TOOLS: tuple[type[Tool], ...] = (
    ReadTool,
    WriteTool,
    EditTool,
    MultiEditTool,
    LSTool,
    GlobTool,
)

__all__ = [
    "FILE_TOOLS",
    "EditTool",
    "FileToolError",
    "GlobTool",
    "LSTool",
    "MultiEditTool",
    "ReadTool",
    "WriteTool",
    "glob_regex",
    "image_type",
    "write_atomic",
]
