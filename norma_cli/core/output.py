"""Output cap and spill (SPEC §7).

Every text result passes one cap (default 30,000 characters). With a spill directory the
full text goes to a file whose sha256 and size are recorded; the model gets the head and a
pointer. Whether a result is already capped is a metadata flag, never guessed from the text.
Tools that produce large outputs write through a ``SpillWriter`` while they run, so nothing
holds the whole output in memory.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from pathlib import Path
from typing import Any

from norma_cli.core.contract import ContentBlock, ToolOutput
from norma_cli.core.record import record

DEFAULT_MAX_CHARS = 30_000
CAPPED = "capped"  # metadata flag: the output was already capped (by a streaming tool)
SPILL = "spill"  # metadata key holding a SpillInfo
# A text is encoded this many characters at a time, so spilling one huge block (a tool that
# returned its output whole) never makes a second, encoded copy of all of it.
SLICE_CHARS = 1 << 20
ENCODE_ERRORS = "norma.spill"


def _encode_errors(exc: UnicodeError) -> tuple[bytes, int]:
    """Raw bytes that surrogateescape kept (U+DC80..U+DCFF) go back to disk byte-exact; any
    other lone surrogate (a JSON tool output may hold one) becomes U+FFFD instead of failing
    a call that already ran."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = bytearray()
    for ch in exc.object[exc.start : exc.end]:
        code = ord(ch)
        out += bytes((code - 0xDC00,)) if 0xDC80 <= code <= 0xDCFF else b"\xef\xbf\xbd"
    return bytes(out), exc.end


codecs.register_error(ENCODE_ERRORS, _encode_errors)


def printable(text: str) -> str:
    """``text`` as valid UTF-8 text: escaped raw bytes and lone surrogates become U+FFFD."""
    return _encode(text).decode("utf-8", "replace")


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")  # the fast path, in C, for any Bash output
    except UnicodeEncodeError:
        return text.encode("utf-8", ENCODE_ERRORS)


@record(frozen=True)
class SpillInfo:
    path: str
    sha256: str
    chars: int
    bytes: int

    def to_wire(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "chars": self.chars, "bytes": self.bytes}


class SpillWriter:
    """Streams text to a spill file while keeping only the first ``head_chars`` in memory.

    The file is written under a temporary name and renamed on ``close`` so a reader never sees
    a half-written spill; the digest covers exactly the bytes on disk (UTF-8). When the disk
    refuses (full, read-only), the file is dropped, ``error`` says why, and the head is still
    kept: the caller reports a truncated output instead of failing a call that already ran.
    """

    def __init__(self, spill_dir: Path | None, head_chars: int, prefix: str = "out") -> None:
        self.head_chars = head_chars
        self._head: list[str] = []
        self._head_len = 0
        self.chars = 0
        self.bytes = 0
        self._sha = hashlib.sha256()
        self._fh: Any = None
        self._final: Path | None = None
        self._tmp: Path | None = None
        self.error: str | None = None
        if spill_dir is not None:
            try:
                spill_dir.mkdir(parents=True, exist_ok=True)
                import tempfile

                self._final = spill_dir / f"{prefix}-{os.urandom(16).hex()}.txt"
                fd, tmp = tempfile.mkstemp(dir=spill_dir, prefix=".spill-")
                self._tmp = Path(tmp)
                self._fh = os.fdopen(fd, "wb")
            except OSError as exc:
                self.error = exc.strerror or str(exc)

    def write(self, text: str) -> None:
        if not text:
            return
        self.chars += len(text)
        if self._head_len < self.head_chars:
            take = text[: self.head_chars - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
        for start in range(0, len(text), SLICE_CHARS):
            data = _encode(text[start : start + SLICE_CHARS])
            self.bytes += len(data)
            self._sha.update(data)
            if self._fh is not None:
                try:
                    self._fh.write(data)
                except OSError as exc:
                    self._fail(exc)

    @property
    def head(self) -> str:
        return "".join(self._head)

    @property
    def over_cap(self) -> bool:
        return self.chars > self.head_chars

    def close(self, keep: bool | None = None) -> SpillInfo | None:
        """Finish the file. Kept only if the output went over the cap (or ``keep`` says so)."""
        if self._fh is None:
            return None
        if keep is None:
            keep = self.over_cap
        fh = self._fh
        try:
            fh.flush()
            if keep:
                os.fsync(fh.fileno())
            fh.close()
            self._fh = None
        except OSError as exc:
            self._fail(exc)
            return None
        assert self._tmp is not None and self._final is not None
        if not keep:
            self._tmp.unlink(missing_ok=True)
            return None
        try:
            os.replace(self._tmp, self._final)
        except OSError as exc:
            self._fail(exc)
            return None
        return SpillInfo(str(self._final), self._sha.hexdigest(), self.chars, self.bytes)

    def _fail(self, exc: OSError) -> None:
        self.error = self.error or exc.strerror or str(exc)
        self.abort()

    def abort(self) -> None:
        """Drop the half-written spill file (also when the disk is full: closing may fail)."""
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


def capped_text(
    head: str, total_chars: int, spill: SpillInfo | None, error: str | None = None
) -> str:
    if spill is not None:
        return (
            f"{head}\n\n[output capped: showing the first {len(head):,} of {total_chars:,} characters; "
            f"full output in {spill.path} (sha256 {spill.sha256})]"
        )
    lost = f" (the full output could not be saved: {error})" if error else ""
    return f"{head}\n\n[output truncated: showing the first {len(head):,} of {total_chars:,} characters{lost}]"


class OutputCapper:
    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS, spill_dir: Path | None = None) -> None:
        self.max_chars = max_chars
        self.spill_dir = spill_dir

    def writer(self, prefix: str = "out") -> SpillWriter:
        return SpillWriter(self.spill_dir, self.max_chars, prefix)

    def cap(self, output: ToolOutput, prefix: str = "out") -> ToolOutput:
        """Apply the cap to every text block, unless a streaming tool already did."""
        if output.metadata.get(CAPPED):
            return output
        total = sum(len(b.text) for b in output.content if b.type == "text")
        if total <= self.max_chars:
            return output
        writer = self.writer(prefix)
        for block in output.content:
            if block.type == "text":
                writer.write(block.text)
        spill = writer.close(keep=True)
        if writer.error:
            output.metadata["spill_error"] = writer.error
        others = [b for b in output.content if b.type != "text"]
        capped = ContentBlock(
            "text", text=capped_text(writer.head, writer.chars, spill, writer.error)
        )
        output.content = [capped, *others]
        output.metadata[CAPPED] = True
        if spill is not None:
            output.metadata[SPILL] = spill
        return output
