"""Server-sent events (the HTML living standard's ``text/event-stream``), read line by line.

Both providers stream this way: OpenAI sends unnamed ``data:`` events ending with
``data: [DONE]``; Anthropic names each event (``event: content_block_delta``) and repeats the
type inside the data.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator

from norma_cli.core.record import record

# The standard's line ends: CRLF, a lone LF or a lone CR. Not str.splitlines(), which also breaks
# at U+2028, form feeds and the like, all of which may stand raw inside a JSON string.
_LINE_END = re.compile(r"\r\n|\r|\n")


@record
class SseEvent:
    event: str  # "message" when the stream gave no name
    data: str


def lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a UTF-8 byte stream, without their line ends, as the chunks arrive.

    A line still open is kept as a list of pieces, so a peer that never sends a line end costs
    linear time (the caller's byte cap bounds the memory); a CR at the end of a chunk is held
    back, as it may be the first half of a CRLF split between two chunks."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending: list[str] = []
    held_cr = False
    for text in _decoded(decoder, chunks):
        if held_cr:
            text = "\r" + text
        held_cr = text.endswith("\r")
        if held_cr:
            text = text[:-1]
        parts = _LINE_END.split(text)
        if len(parts) == 1:
            pending.append(text)
            continue
        pending.append(parts[0])
        yield "".join(pending)
        yield from parts[1:-1]
        pending = [parts[-1]]
    if held_cr:
        yield "".join(pending)
        pending = []
    if any(pending):
        yield "".join(pending)  # the last line had no line end


def _decoded(decoder: codecs.IncrementalDecoder, chunks: Iterable[bytes]) -> Iterator[str]:
    for chunk in chunks:
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)  # a sequence cut off at the end: U+FFFD


def events(lines: Iterable[str]) -> Iterator[SseEvent]:
    """Dispatch an event at each blank line; ``:`` lines are comments (keep-alives)."""
    name = ""
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                yield SseEvent(name or "message", "\n".join(data))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        # id and retry are for reconnecting EventSource clients; a model reply is not resumable
    # An event not closed by a blank line when the stream ends is discarded (as the standard
    # says): it is a connection that broke off mid-event, and the caller sees an unfinished reply.
