"""The agent loop of SPEC §16, over the same executor as every other call:

    SessionStart hooks → UserPromptSubmit hooks (a block ends the run, exit 3, before any model
    request; context they add goes with the prompt) → model request with the agent's exposed
    tool schemas → the reply's tool calls run as ONE batch through the executor (its
    concurrency rules; a denied call is an error result carrying the reason, and the loop goes
    on) → paired results back to the model → … until the model ends its turn → Stop hooks
    (``decision: block`` continues with the hook's reason as a new user message, at most
    ``[agent] max_stop_continuations`` times; ``continue: false`` stops hard, exit 3).

SessionEnd fires when the runtime closes (normal end, error, SIGINT, SIGTERM): the caller's
close path. Every message goes to the transcript as it happens, so an interrupted run leaves a
conversation that ``--resume`` continues.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from norma_cli.agent.messages import Message, Text, ToolResultBlock, ToolUse, unpaired
from norma_cli.agent.output import Emitter, Outcome
from norma_cli.agent.progress import Progress
from norma_cli.agent.providers.base import ModelRequest, ProviderError, ToolSpec, Usage
from norma_cli.agent.transcript import Transcript
from norma_cli.core.record import field, record

if TYPE_CHECKING:
    from norma_cli.agent.providers.base import Provider
    from norma_cli.core.hooks import HookOutcome
    from norma_cli.runtime import Runtime

DEFAULT_MAX_STOP_CONTINUATIONS = 3
STATE_KEY = "agent_loop"  # Session.state entry the Task tool finds its loop through

DEFAULT_SYSTEM = """\
You are an agent working through tools in the directory {cwd}. Every tool call passes norma's \
policy pipeline: a call may be denied (its result is an error that says why and which rule \
decided) or need a person's approval. Do not repeat a denied call or try to get around the \
rule: change your approach, or say what you could not do and why. When the task is done, \
answer with a short summary of what you did."""


@record
class PromptOptions:
    prompt: str
    provider: str | None = None
    model: str | None = None
    system: str | None = None
    max_turns: int | None = None
    max_tokens_total: int | None = None
    output: str = "text"
    resume: bool = False  # --resume: the session's transcript must exist
    max_concurrency: int = 8


@record
class Budget:
    """Token use of the whole run (subagents included) against ``--max-tokens-total``."""

    limit: int | None
    used: Usage = field(default_factory=Usage)

    def exhausted(self) -> bool:
        return self.limit is not None and self.used.total >= self.limit


@record
class LoopContext:
    """What a ``Task`` call needs from the session that made it."""

    runtime: Runtime
    provider: Provider
    options: PromptOptions
    emitter: Emitter
    progress: Progress
    budget: Budget
    depth: int


class AgentLoop:
    def __init__(self, rt: Runtime, provider: Provider, options: PromptOptions, *,
                 emitter: Emitter | None = None, progress: Progress | None = None, depth: int = 0,
                 budget: Budget | None = None, parent_session_id: str | None = None) -> None:  # fmt: skip
        self.rt = rt
        self.provider = provider
        self.options = options
        self.emitter = emitter or Emitter(options.output)
        self.progress = progress or Progress(enabled=False)
        self.depth = depth
        self.budget = budget or Budget(options.max_tokens_total)
        self.parent_session_id = parent_session_id
        self.usage = Usage()  # this run of this session
        self.session_usage = Usage()
        self.turns = 0
        self.answer = ""  # the model's latest text in this run
        self.transcript: Transcript | None = None
        self.system = ""
        self._streamed = 0
        self._mcp_loaded = False

    @property
    def sid(self) -> str:
        return self.rt.session.id

    # ------------------------------------------------------------------ the run
    def run(self) -> Outcome:
        from norma_cli.agent.subagent import install_task_tool

        rt = self.rt
        secrets = tuple(getattr(self.provider, "secrets", ()) or ())
        self.transcript = Transcript.open(rt.session.dir, self.sid, store=rt.store, secrets=secrets,
                                          must_exist=self.options.resume)  # fmt: skip
        for note in self.transcript.notes:
            self.emitter.note(note)
        rt.session.state[STATE_KEY] = LoopContext(rt, self.provider, self.options, self.emitter,
                                                  self.progress, self.budget, self.depth)  # fmt: skip
        install_task_tool(rt, self.depth)
        try:
            return self._run(self.transcript)
        except KeyboardInterrupt:
            self._abort(self.transcript, "interrupt", 130)
            raise
        except SystemExit as exc:  # SIGTERM/SIGHUP (cli.run.Interrupted)
            code = exc.code if isinstance(exc.code, int) else 1
            self._abort(self.transcript, "terminated", code)
            raise
        except BaseException as exc:
            self._abort(self.transcript, "error", 1, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.progress.clear()
            self.transcript.close()

    def _run(self, t: Transcript) -> Outcome:
        rt = self.rt
        history = t.messages()
        resumed = bool(history)
        for entry in t.records:  # a resumed session's usage counts toward its total
            if entry.get("type") == "message" and isinstance(entry.get("usage"), dict):
                self.session_usage.add(Usage(int(entry["usage"].get("input_tokens") or 0),
                                             int(entry["usage"].get("output_tokens") or 0)))  # fmt: skip
        previous = t.last("start")
        self.system = (
            self.options.system
            or (previous or {}).get("system")
            or DEFAULT_SYSTEM.format(cwd=rt.session.cwd)
        )
        t.append({
            "type": "start", "session_id": self.sid, "resumed": resumed, "provider": self.provider.name,
            "model": self.provider.model, "agent": rt.session.agent, "cwd": str(rt.session.cwd),
            "system": self.system, "parent_session_id": self.parent_session_id, "depth": self.depth,
            "pid": os.getpid(),
        })  # fmt: skip
        self.emitter.start(self.sid, resumed=resumed, provider=self.provider.name, model=self.provider.model,
                           agent=rt.session.agent, parent_session_id=self.parent_session_id)  # fmt: skip
        dangling = unpaired(history)
        if dangling:  # killed between a call and its result: the model must see one result per call
            closing = Message("user", [ToolResultBlock.error(u.id, "interrupted: the run stopped before this call returned")
                                       for u in dangling])  # fmt: skip
            self._record(closing, history, synthetic=True)
        self._replay_unlocks(history)

        source = "resume" if resumed else ("subagent" if self.depth else "startup")
        contexts = _contexts(rt.session.start(source))
        if self.depth == 0 and rt.hooks.has("UserPromptSubmit"):
            outcomes = rt.hooks.run("UserPromptSubmit", self._payload("UserPromptSubmit", prompt=self.options.prompt),
                                    stop_on_block=True)  # fmt: skip
            blocked = next((o for o in outcomes if o.blocked), None)
            if blocked is not None:
                t.append({"type": "blocked", "event": "UserPromptSubmit", "hook": blocked.hook,
                          "source": blocked.source, "reason": blocked.reason})  # fmt: skip
                return self._finish(
                    t, 3, "blocked", f"prompt blocked by hook {blocked.hook}: {blocked.reason}"
                )
            contexts += _contexts(outcomes)
        prompt = Message("user", [Text(self.options.prompt), *(Text(c) for c in contexts)])
        self._record(prompt, history)

        continuations = 0
        limit = int(
            rt.config.get("agent", "max_stop_continuations", DEFAULT_MAX_STOP_CONTINUATIONS)
        )
        while True:
            if self.options.max_turns is not None and self.turns >= self.options.max_turns:
                return self._finish(t, 5, "max_turns", f"--max-turns {self.options.max_turns} reached",
                                    self.answer)  # fmt: skip
            if self.budget.exhausted():
                return self._finish(t, 5, "token_budget",
                                    f"token budget reached: {self.budget.used.total} of {self.budget.limit} tokens used",
                                    self.answer)  # fmt: skip
            request = ModelRequest(self.system, history, self._tool_specs())
            self.progress.thinking()
            self._streamed = 0
            try:
                reply = self.provider.complete(request, self._on_delta)
            except ProviderError as exc:
                return self._finish(t, 1, "provider_error", str(exc), self.answer)
            finally:
                self.progress.clear()
            self.turns += 1
            self.answer = reply.message.text() or self.answer
            self.usage.add(reply.usage)
            self.session_usage.add(reply.usage)
            self.budget.used.add(reply.usage)
            self._record(reply.message, history, usage=reply.usage.to_json(), stop_reason=reply.stop_reason,
                         provider=self.provider.name, model=self.provider.model)  # fmt: skip
            self.emitter.usage(self.sid, reply.usage, self.usage)
            uses = reply.message.tool_uses()
            if uses:
                self._run_tools(uses, history)
                continue
            text = reply.message.text()
            if self.depth == 0 and rt.hooks.has("Stop"):
                outcomes = rt.hooks.run("Stop", self._payload("Stop", stop_hook_active=continuations > 0,
                                                              last_assistant_message=text))  # fmt: skip
                hard = next((o for o in outcomes if o.stop), None)
                if hard is not None:
                    return self._finish(
                        t, 3, "stopped", f"stopped by Stop hook {hard.hook}: {hard.reason}", text
                    )
                asks = [o for o in outcomes if o.blocked]
                if asks and continuations < limit:
                    continuations += 1
                    self._record(
                        Message("user", [Text(o.reason) for o in asks]), history, hook="Stop"
                    )
                    continue
                if asks:
                    self.emitter.note(
                        f"a Stop hook asked to continue again; [agent] max_stop_continuations = {limit} reached"
                    )
            return self._finish(t, 0, "finished", "", text)

    # ------------------------------------------------------------------ steps
    def _tool_specs(self) -> list[ToolSpec]:
        if self.rt.mcp is not None and not self._mcp_loaded:
            self.rt.mcp.load()  # servers never listed yet: the model must see their tools too
            self._mcp_loaded = True
        asm = self.rt.assembly
        specs: list[ToolSpec] = []
        for tool in asm.exposed():
            description = tool.description + (f"\n\n{tool.prompt}" if tool.prompt else "")
            specs.append(ToolSpec(tool.name, description, asm.schema_for(tool)))
        return specs

    def _run_tools(self, uses: list[ToolUse], history: list[Message]) -> None:
        """One batch through the executor; always exactly one result per call, also when the
        run is interrupted halfway (the calls that did not return get an 'interrupted' one)."""
        from norma_cli.core.contract import ToolCall

        for use in uses:
            self.emitter.tool_use(self.sid, use)
        calls = [ToolCall(u.id, u.name, u.input) for u in uses]
        results: list[ToolResultBlock] = []
        extra: list[str] = []
        self.progress.tool([u.name for u in uses])
        try:
            for result in self.rt.executor.iter_batch(calls, self.options.max_concurrency):
                block = ToolResultBlock(result.tool_use_id, [b.to_wire() for b in result.content],
                                        result.is_error, result.meta.to_wire())  # fmt: skip
                results.append(block)
                self.emitter.tool_result(self.sid, block)
                extra.extend(
                    str(m.get("content", "")) for m in result.extra_messages if m.get("content")
                )
        except BaseException:
            done = {r.tool_use_id for r in results}
            results += [ToolResultBlock.error(u.id, "interrupted: the run stopped before this call returned")
                        for u in uses if u.id not in done]  # fmt: skip
            self._record(Message("user", list(results)), history, interrupted=True)
            raise
        finally:
            self.progress.clear()
        self._record(Message("user", [*results, *(Text(x) for x in extra)]), history)

    def _record(self, message: Message, history: list[Message], **extra: Any) -> None:
        assert self.transcript is not None
        history.append(message)
        self.transcript.add_message(message, agent=self.rt.session.agent, **extra)
        self.emitter.message(self.sid, message)

    def _on_delta(self, piece: str) -> None:
        self._streamed += len(piece)
        self.progress.streamed(self._streamed)

    def _replay_unlocks(self, history: list[Message]) -> None:
        """Resume: the skills the conversation invoked unlock again what they unlocked (they
        are stored per session too; replaying also covers a store that lost them)."""
        asm = self.rt.assembly
        if asm.unlocks is None:
            return
        ok = {r.tool_use_id for m in history for r in m.tool_results() if not r.is_error}
        for message in history:
            for use in message.tool_uses():
                if use.name == "Skill" and use.id in ok and isinstance(use.input, dict):
                    skill = asm.visible_skills.get(str(use.input.get("name", "")))
                    if skill is not None:
                        asm.unlock(skill)

    def _payload(self, event: str, **extra: Any) -> dict[str, Any]:
        s = self.rt.session
        assert self.transcript is not None
        return {"session_id": s.id, "cwd": str(s.cwd), "hook_event_name": event, "permission_mode": s.mode,
                "agent": s.agent, "transcript_path": str(self.transcript.path), **extra}  # fmt: skip

    def _outcome(self, code: int, reason: str, message: str, text: str) -> Outcome:
        return Outcome(code, reason, self.sid, text, message, self.turns, self.usage.to_json(),
                       self.session_usage.to_json(), self.provider.name, self.provider.model,
                       str(self.transcript.path) if self.transcript else "")  # fmt: skip

    def _finish(
        self, t: Transcript, code: int, reason: str, message: str, text: str = ""
    ) -> Outcome:
        outcome = self._outcome(code, reason, message, text)
        t.append({"type": "end", "reason": reason, "exit_code": code, "message": message or None,
                  "usage": self.usage.to_json(), "turns": self.turns})  # fmt: skip
        self.emitter.end(outcome)
        return outcome

    def _abort(self, t: Transcript, reason: str, code: int, message: str = "") -> None:
        try:
            t.append({"type": "end", "reason": reason, "exit_code": code, "message": message or None,
                      "usage": self.usage.to_json(), "turns": self.turns})  # fmt: skip
        except Exception:  # the transcript is what failed: nothing more to write to it
            return
        self.emitter.end(self._outcome(code, reason, message, ""))


def _contexts(outcomes: list[HookOutcome]) -> list[str]:
    return [o.additional_context for o in outcomes if o.additional_context]


def run_prompt(rt: Runtime, options: PromptOptions, *, emitter: Emitter | None = None,
               progress: Progress | None = None) -> Outcome:  # fmt: skip
    """Run ``norma run -p`` on a built runtime: pick and build the provider, run the loop.

    The caller closes the runtime (that fires SessionEnd); configuration problems raise
    ConfigError/UsageError (exit 2) before any model request.
    """
    from norma_cli.agent import providers

    settings = providers.select(rt.config, options.provider, options.model)
    provider = providers.build(
        settings, rt.config, rt.plugins, store=rt.store, session_id=rt.session.id
    )
    if options.max_tokens_total is None:
        options.max_tokens_total = rt.config.get("agent", "max_tokens_total")
    if options.max_turns is None:
        options.max_turns = rt.config.get("agent", "max_turns")
    emitter = emitter or Emitter(options.output)
    try:
        return AgentLoop(rt, provider, options, emitter=emitter, progress=progress).run()
    finally:
        close = getattr(provider, "close", None)
        if callable(close):
            close()
