"""Server-sent events (the HTML living standard's ``text/event-stream``), read line by line.

Both providers stream this way: OpenAI sends unnamed ``data:`` events ending with
``data: [DONE]``; Anthropic names each event (``event: content_block_delta``) and repeats the
type inside the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from norma_cli.core.record import record


@record
class SseEvent:
    event: str  # "message" when the stream gave no name
    data: str


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
