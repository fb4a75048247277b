"""What ``norma run -p`` prints, by ``--output``:

* ``text`` — the model's final answer on stdout; why the run stopped, if not finished, on stderr.
* ``json`` — one object at the end: session id, exit code, reason, the answer, turns, usage.
* ``stream-json`` — one JSON event per line as the session goes: ``start``, ``message``,
  ``tool_use``, ``tool_result`` (with the ``norma`` metadata), ``usage``, ``end``. Every event
  carries its ``session_id`` (a subagent's events carry the child's).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from norma_cli.core.record import field, record

if TYPE_CHECKING:
    from norma_cli.agent.messages import Message, ToolResultBlock, ToolUse
    from norma_cli.agent.providers.base import Usage

OUTPUTS = ("text", "json", "stream-json")


@record
class Outcome:
    """How a session's run ended."""

    exit_code: int
    reason: str  # finished | blocked | stopped | max_turns | token_budget | provider_error
    session_id: str
    text: str = ""  # the model's last answer
    message: str = ""  # one line saying why, when the run did not finish normally
    turns: int = 0
    usage: dict[str, int] = field(default_factory=dict)  # this run
    session_usage: dict[str, int] = field(
        default_factory=dict
    )  # the whole session, resumes included
    provider: str = ""
    model: str = ""
    transcript: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "result",
            "session_id": self.session_id,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "result": self.text,
            "message": self.message or None,
            "turns": self.turns,
            "usage": self.usage,
            "session_usage": self.session_usage,
            "provider": self.provider,
            "model": self.model,
            "transcript": self.transcript,
        }


class Emitter:
    def __init__(self, mode: str = "text", out: TextIO | None = None, err: TextIO | None = None,
                 *, top: bool = True) -> None:  # fmt: skip
        self.mode = mode
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.top = top  # a subagent's emitter only streams events; its result is a tool result

    def child(self) -> Emitter:
        return Emitter(self.mode, self.out, self.err, top=False)

    def _event(self, event: dict[str, Any]) -> None:
        if self.mode == "stream-json":
            self.out.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
            self.out.flush()

    def start(self, session_id: str, **fields: Any) -> None:
        self._event({"type": "start", "session_id": session_id, **fields})

    def message(self, session_id: str, message: Message) -> None:
        self._event({"type": "message", "session_id": session_id, **message.to_json()})

    def tool_use(self, session_id: str, use: ToolUse) -> None:
        self._event(
            {
                "type": "tool_use",
                "session_id": session_id,
                "id": use.id,
                "name": use.name,
                "input": use.input,
            }
        )

    def tool_result(self, session_id: str, result: ToolResultBlock) -> None:
        self._event({"session_id": session_id, **result.to_json()})

    def usage(self, session_id: str, turn: Usage, run: Usage) -> None:
        self._event(
            {"type": "usage", "session_id": session_id, **turn.to_json(), "run": run.to_json()}
        )

    def note(self, text: str) -> None:
        """A warning for the person running norma (stderr, every mode)."""
        if self.top:
            self.err.write(f"norma: {text}\n")
            self.err.flush()

    def end(self, outcome: Outcome) -> None:
        event = outcome.to_json()
        event["type"] = "end"
        self._event(event)
        if not self.top:
            return
        if outcome.message:
            self.err.write(f"norma: {outcome.message}\n")
            self.err.flush()
        if self.mode == "json":
            self.out.write(json.dumps(outcome.to_json(), ensure_ascii=False) + "\n")
        elif self.mode == "text" and outcome.text:
            self.out.write(outcome.text if outcome.text.endswith("\n") else outcome.text + "\n")
        self.out.flush()
