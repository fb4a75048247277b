"""The execution pipeline of SPEC §3: one ``tool_use`` in, exactly one paired result out.

    1 lookup → 2 defaults → 3 schema → 4 permission → 5 PreToolUse hooks →
    6 re-validation of a rewritten input (schema *and* permission) → ask resolution →
    7 call (timeout; exceptions become error results) → 8 cap/spill → 9 PostToolUse hooks →
    10 record

Whatever happens inside, ``run`` returns one ``ToolResult``; nothing escapes except a failure
to record the trace, which is reported (an unrecorded call must not look like a recorded one).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from norma_cli.core import aioloop
from norma_cli.core.contract import (
    CallContext,
    CallMeta,
    ContentBlock,
    Decision,
    RuleRef,
    Tool,
    ToolCall,
    ToolOutput,
    ToolResult,
)
from norma_cli.core.digest import input_digest
from norma_cli.core.hooks import MAX_TEXT_CHARS, HookRunner, cap_text
from norma_cli.core.output import SPILL, OutputCapper
from norma_cli.core.permission import PermissionEngine
from norma_cli.core.record import field, record
from norma_cli.core.registry import ToolRegistry
from norma_cli.core.schema import InvalidSchema, SchemaCache, SchemaIssue
from norma_cli.errors import Interrupted, NormaError
from norma_cli.store.sqlite import Store, TraceRecord

if TYPE_CHECKING:
    from norma_cli.policy.intercept import Guard

BATCH_CHUNK = 64  # parallel calls whose traces share one commit
# A batch runs a concurrency-safe tool's calls inline while its recent calls waited (on I/O,
# a child process, the network) less than this: a thread pool only helps calls that wait, and
# under the GIL it costs calls that merely compute more than it gives.
INLINE_S = 0.001

# (tool, call, decision, ctx) -> the final allow/deny (or an ask left pending, with pending_id)
AskResolver = Callable[[Tool, ToolCall, Decision, CallContext], Decision]
# (tool name, ctx) -> a refusal reason when the tool is locked for this session, else None
Gate = Callable[[str, CallContext], str | None]


@record
class Trail:
    """The state transitions of one call, in order, with time and deciding party."""

    started: float = field(default_factory=time.perf_counter)
    events: list[dict[str, Any]] = field(default_factory=list)
    input_is_text: bool = True  # False: a string in the input cannot be encoded (refused)

    def add(self, state: str, by: str = "", **detail: Any) -> None:
        event: dict[str, Any] = {"t": time.time(), "state": state}
        if by:
            event["by"] = by
        if detail:
            event.update({k: v for k, v in detail.items() if v not in (None, "", [], {})})
        self.events.append(event)


def deny_ask(tool: Tool, call: ToolCall, decision: Decision, ctx: CallContext) -> Decision:
    """The resolver of last resort: nobody can be asked, so the answer is no."""
    return Decision.deny("ask", f"{decision.reason}; nobody to ask, denied", rule=decision.rule)


class Executor:
    def __init__(
        self,
        registry: ToolRegistry,
        engine: PermissionEngine,
        hooks: HookRunner,
        capper: OutputCapper,
        context: CallContext,
        *,
        store: Store | None = None,
        schemas: SchemaCache | None = None,
        resolve_ask: AskResolver = deny_ask,
        gate: Gate | None = None,
        schema_for: Callable[[Tool], dict[str, Any]] | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.registry = registry
        self.engine = engine
        self.hooks = hooks
        self.capper = capper
        self.context = context
        self.store = store
        self.schemas = schemas or SchemaCache()
        self.resolve_ask = resolve_ask
        self.gate = gate
        self.schema_for = schema_for or (lambda tool: tool.input_schema)
        self.guard = guard  # SPEC §9 interception, between the permission decision and the call
        self._defaults: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._local = threading.local()  # per-thread trace sink while a batch chunk runs
        self._cost: dict[str, float] = {}  # typical seconds per call, by tool (batch scheduling)
        self._recent: dict[str, collections.deque[float]] = {}  # the last few call times

    # ------------------------------------------------------------------ one call
    def run(self, call: ToolCall) -> ToolResult:
        trail = Trail()
        meta = CallMeta(trace_id=trace_id())
        ctx = self._context(call)
        meta.input_digest, trail.input_is_text = _digest(call.input)
        try:
            output = self._pipeline(call, ctx, meta, trail)
        except Exception as exc:  # a bug in norma or a plugin: still one paired result
            output = _internal_error(call, meta, trail, exc)
        except BaseException as exc:  # SIGTERM / Ctrl-C: the call still leaves its trace
            if not interrupted(exc):  # a plugin's SystemExit / GeneratorExit: not a way out
                output = _internal_error(call, meta, trail, exc)
                return self._finish(call, meta, trail, output)
            last = trail.events[-1] if trail.events else {}
            if last.get("state") == "denied":  # a cancelled approval wait recorded its denial
                meta.status, meta.decision, meta.reason = "denied", "deny", last.get("reason", "")
                meta.pending_id = last.get("pending_id")
            else:
                trail.add("failed", by="signal", error=type(exc).__name__)
                meta.status = "failed"
            meta.duration_ms = (time.perf_counter() - trail.started) * 1000
            self._record(call, meta, trail)
            raise
        return self._finish(call, meta, trail, output)

    def _finish(
        self, call: ToolCall, meta: CallMeta, trail: Trail, output: ToolOutput
    ) -> ToolResult:
        meta.duration_ms = (time.perf_counter() - trail.started) * 1000
        spill = output.metadata.get(SPILL)
        meta.spill = spill
        result = ToolResult(
            call.id, output.content, output.is_error, meta, output.extra_messages, call.dialect
        )
        self._record(call, meta, trail)
        return result

    def _context(self, call: ToolCall) -> CallContext:
        c = self.context
        # The session's mode is live (EnterPlanMode / ExitPlanMode change it between calls).
        mode = getattr(c.session, "mode", None) or c.mode
        return CallContext(
            session_id=c.session_id,
            cwd=c.cwd,
            roots=c.roots,
            mode=mode,
            agent=c.agent,
            tool_use_id=call.id,
            session=c.session,
        )

    def _admit(
        self, call: ToolCall, ctx: CallContext, meta: CallMeta, trail: Trail
    ) -> tuple[Tool, dict[str, Any], dict[str, Any], Decision] | ToolOutput:
        """Steps 1-4: lookup, defaults, schema, permission. A ToolOutput means refused."""
        # 1. lookup
        tool = self.registry.get(call.name)
        if tool is None:
            trail.add("refused", by="lookup", reason="unknown tool")
            meta.stage, meta.decision, meta.reason = "lookup", None, f"unknown tool: {call.name}"
            return ToolOutput.error(f"unknown tool: {call.name}")
        if self.gate is not None:
            locked = self.gate(tool.name, ctx)
            if locked:
                trail.add("refused", by="lookup", reason=locked)
                meta.stage, meta.decision, meta.reason = "lookup", "deny", locked
                meta.status = "denied"
                return ToolOutput.error(locked)
        if not isinstance(call.input, dict):
            trail.add("refused", by="schema", reason="input is not an object")
            meta.stage, meta.decision = "schema", None
            meta.reason = f"input must be a JSON object, got {type(call.input).__name__}"
            return ToolOutput.error(meta.reason)
        if not trail.input_is_text:
            meta.stage, meta.decision = "schema", None
            meta.reason = f"invalid input for {tool.name}: a string is not valid UTF-8 text"
            trail.add("refused", by="schema", reason=meta.reason)
            return ToolOutput.error(meta.reason)

        # 2. defaults, 3. schema
        schema = self.schema_for(tool)
        tool_input = self._fill_defaults(schema, call.input)
        if not tool.raw_input:
            try:
                issues = self.schemas.validate(schema, tool_input)
            except InvalidSchema as exc:  # the tool's own schema is broken: refuse, fail closed
                trail.add("refused", by="schema", reason=str(exc))
                meta.stage, meta.decision, meta.reason = "schema", None, f"{tool.name}: {exc}"
                return ToolOutput.error(meta.reason)
            if issues:
                return self._invalid(meta, trail, "schema", tool.name, issues)
        trail.add("validated", by="schema")

        # 4. permission
        try:
            decision = self.engine.evaluate(tool, tool_input, ctx)
        except NormaError as exc:  # input no rule can judge (a NUL in a path): refused
            decision = Decision.deny("input", str(exc))
        except BaseException as exc:  # only extension code raises these: it said deny
            if isinstance(exc, Exception) or interrupted(exc):
                raise
            decision = Decision.deny("permission", _raised("the permission check", exc))
        decision = known(decision, "permission")
        trail.add(
            "permission",
            by=decision.stage,
            decision=decision.behavior,
            reason=decision.reason,
            rule=decision.rule.text if decision.rule else None,
            source=decision.rule.source if decision.rule else None,
        )
        if decision.behavior == "deny":
            return self._denied(meta, trail, decision)
        return tool, schema, tool_input, decision

    def decide(self, call: ToolCall) -> ToolResult:
        """Steps 1-4 only (``--dry-run``): the decision, nothing executed, nothing recorded."""
        trail = Trail()
        meta = CallMeta()
        meta.input_digest, trail.input_is_text = _digest(call.input)
        admitted = self._admit(call, self._context(call), meta, trail)
        if isinstance(admitted, ToolOutput):
            output = admitted
        else:
            tool, _, tool_input, decision = admitted
            if self.guard is not None and decision.behavior == "allow":
                preview = self.guard.preview(tool, tool_input, self._context(call))
                decision = decision if preview is None else known(preview, "intercept")
            self._set_decision(meta, decision)
            meta.status = {"ask": "pending", "deny": "denied"}.get(decision.behavior, "allowed")
            output = ToolOutput.text(f"dry run: {decision.behavior} ({decision.reason})")
        meta.duration_ms = (time.perf_counter() - trail.started) * 1000
        return ToolResult(call.id, output.content, output.is_error, meta, [], call.dialect)

    def _pipeline(
        self, call: ToolCall, ctx: CallContext, meta: CallMeta, trail: Trail
    ) -> ToolOutput:
        admitted = self._admit(call, ctx, meta, trail)
        if isinstance(admitted, ToolOutput):
            return admitted
        tool, schema, tool_input, decision = admitted
        final_input = decision.updated_input if decision.updated_input is not None else tool_input

        # 5. PreToolUse hooks
        if self.hooks.has("PreToolUse"):
            payload = self._payload("PreToolUse", ctx, tool.name, final_input)
            pre = self.hooks.pre_tool_use(payload, tool.name)
            for outcome in pre.outcomes:
                trail.add("hook", **outcome.to_event())
            if pre.blocked:
                hook_ref = RuleRef(pre.hook or "hook", pre.source or "hook")
                return self._denied(
                    meta, trail, Decision.deny("hook", pre.reason, rule=hook_ref), by=pre.hook
                )
            if pre.ask and decision.behavior == "allow":
                decision = Decision.ask(
                    "hook",
                    hook_text(pre.reason),
                    rule=RuleRef(pre.hook or "hook", pre.source or "hook"),
                )
            if pre.updated_input is not None:
                final_input = pre.updated_input
            extra_context = [hook_text(text) for text in pre.additional_context]
        else:
            extra_context = []

        # 6. re-validation of a rewritten input: schema and permission again
        if final_input is not tool_input and final_input != tool_input:
            meta.input_digest, is_text = _digest(final_input)
            if not is_text:
                reason = "rewritten input is invalid: a string is not valid UTF-8 text"
                return self._denied(meta, trail, Decision.deny("revalidate", reason))
            if not tool.raw_input:
                issues = self.schemas.validate(schema, final_input)
                if issues:
                    reason = "rewritten input is invalid: " + "; ".join(map(str, issues))
                    return self._denied(meta, trail, Decision.deny("revalidate", reason))
            again = known(self.engine.evaluate(tool, final_input, ctx), "revalidate")
            trail.add(
                "revalidated",
                by=again.stage,
                decision=again.behavior,
                reason=again.reason,
                rule=again.rule.text if again.rule else None,
            )
            if again.behavior == "deny":
                again.reason = f"rewritten input: {again.reason}"
                return self._denied(meta, trail, again)
            if again.behavior == "ask" and decision.behavior == "allow":
                decision = again  # a rewrite can never widen what was approved

        # ask → resolved by a plugin, a person, or the approval queue; else denied
        if decision.behavior == "ask":
            trail.add(
                "pending",
                by=decision.stage,
                reason=decision.reason,
                rule=decision.rule.text if decision.rule else None,
            )
            asked = decision
            if ctx.mode in ("dontAsk", "auto"):  # these modes never ask anybody
                return self._denied(
                    meta,
                    trail,
                    Decision.deny(
                        "mode", f"{ctx.mode} mode never asks: {asked.reason}", rule=asked.rule
                    ),
                )
            try:
                decision = known(
                    self.resolve_ask(
                        tool, ToolCall(call.id, call.name, final_input, call.dialect), asked, ctx
                    ),
                    "ask",
                )
            except BaseException as exc:  # nobody gave an answer: no
                if interrupted(exc):  # the run ends; a cancelled wait recorded its denial
                    raise
                decision = Decision.deny("ask", _raised("resolving the ask", exc), rule=asked.rule)
            if decision.behavior == "ask":  # still pending (approval queue, --no-wait)
                meta.pending_id = decision.pending_id
                meta.status = "pending"
                self._set_decision(meta, decision, asked)
                trail.add("pending", by="approval", pending_id=meta.pending_id)
                return ToolOutput.error(f"pending approval {meta.pending_id}: {asked.reason}")
            trail.add(
                "resolved",
                by=decision.stage,
                decision=decision.behavior,
                reason=hook_text(decision.reason),
                pending_id=decision.pending_id,
            )
            if decision.behavior != "allow":  # fail closed: only an exact allow runs the call
                return self._denied(meta, trail, decision)
            if decision.rule is None and asked.rule is not None:
                decision.rule = asked.rule

        self._set_decision(meta, decision)

        # guard (SPEC §9): intercept rules, judge, approval queue — after the permission answer
        executing_by, executing_detail = decision.stage, {}
        if self.guard is not None:
            verdict = self.guard.check(
                tool, final_input, ctx, trail, permission=decision, trace_id=meta.trace_id
            )
            verdict_decision = known(verdict.decision, "intercept")
            if verdict_decision.behavior == "deny":
                return self._denied(meta, trail, verdict_decision, by=verdict.by, **verdict.detail)
            if verdict_decision.behavior == "ask":  # left pending (--no-wait)
                meta.pending_id = verdict_decision.pending_id
                meta.status = "pending"
                self._set_decision(meta, verdict_decision)
                return ToolOutput.error(
                    f"pending approval {meta.pending_id}: {verdict_decision.reason}"
                )
            executing_by, executing_detail = verdict.by, verdict.detail

        # 7. call
        trail.add("executing", by=executing_by, **executing_detail)
        output = self._call(tool, final_input, ctx, trail)

        # 8. cap / spill
        output = self.capper.cap(output, prefix=tool.name)
        spill = output.metadata.get(SPILL)
        if spill is not None:
            trail.add("spilled", path=spill.path, sha256=spill.sha256, chars=spill.chars)

        # 9. PostToolUse hooks (may add context; cannot un-run the call)
        event = "PostToolUseFailure" if output.is_error else "PostToolUse"
        if self.hooks.has(event):
            payload = self._payload(event, ctx, tool.name, final_input)
            if output.is_error:
                payload["error"] = output.joined_text()[:10_000]
            else:
                payload["tool_response"] = _response_for_hook(output)
            for outcome in self.hooks.run(event, payload, tool.name):
                trail.add("hook", **outcome.to_event())
                if outcome.additional_context:
                    extra_context.append(hook_text(outcome.additional_context))
                if outcome.blocked and outcome.reason:
                    extra_context.append(hook_text(outcome.reason))
        if extra_context:
            output.extra_messages.extend(
                {"role": "user", "content": text, "source": "hook"} for text in extra_context
            )
        meta.status = "failed" if output.is_error else "completed"
        dispatched = output.metadata.get("dispatched")  # ExecuteExtraTool: its inner call's outcome
        if dispatched is not None:
            trail.add("dispatched", by=tool.name, **dispatched)
            if dispatched["status"] in ("denied", "pending"):  # the inner decision is the answer
                meta.status = dispatched["status"]
                for key in ("decision", "stage", "rule", "source", "reason", "pending_id"):
                    setattr(meta, key, dispatched.get(key))
        trail.add(meta.status, by=tool.name)
        return output

    def _call(
        self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext, trail: Trail
    ) -> ToolOutput:
        # The rule of Tool.timeout: None means the tool bounds itself (every built-in: Bash
        # enforces its command's timeout, the task tools their waits), so it is called right
        # here at no cost; a number is the executor's to enforce, on an async tool through the
        # event loop and on a sync one through a worker thread (``_call_bounded``).
        timeout = tool.timeout
        try:
            if timeout is not None and not 0 < timeout < 1e9:  # also refuses NaN and "5"
                raise ValueError(f"timeout {timeout!r} is not a number of seconds")
            if timeout is None:
                value = tool.call(tool_input, ctx)
            else:
                value = _call_bounded(tool, tool_input, ctx, timeout)
            if isinstance(value, Awaitable):  # an async tool (inspect would cost its import)
                try:
                    value = aioloop.run(_await(value), timeout)
                except TimeoutError:
                    if timeout is None:  # the tool's own error: it has no deadline here
                        raise
                    raise _Expired from None
            if not isinstance(value, ToolOutput):
                from norma_cli.core.functool import to_output

                value = to_output(value)
            return value
        except _Expired:
            trail.add("timeout", by=tool.name, seconds=timeout)
            return self._failure(tool, tool_input, ctx, f"{tool.name} timed out after {timeout:g}s")
        except Exception as exc:
            return self._failure(tool, tool_input, ctx, f"{tool.name} failed: {describe(exc)}")
        except BaseException as exc:  # SystemExit, GeneratorExit: the tool failed, norma goes on
            if interrupted(exc):
                raise
            return self._failure(tool, tool_input, ctx, f"{tool.name} failed: {describe(exc)}")

    def _failure(
        self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext, message: str
    ) -> ToolOutput:
        return ToolOutput.error(message, exception=True)

    # ------------------------------------------------------------------ batches
    def run_batch(self, calls: Sequence[ToolCall], max_concurrency: int = 8) -> list[ToolResult]:
        return list(self.iter_batch(calls, max_concurrency))

    def iter_batch(
        self, calls: Sequence[ToolCall], max_concurrency: int = 8
    ) -> Iterator[ToolResult]:
        """Consecutive concurrency-safe calls may run in parallel (bounded); others run alone.

        Results are yielded in input order, each paired with its call's id. Concurrency-safe
        calls run in chunks whose traces are committed together (one transaction per chunk)
        *before* the chunk's results are yielded: no result is ever emitted without its durable
        record, and an interrupted batch still records every call that ran.
        """
        for chunk in self.iter_batch_chunks(calls, max_concurrency):
            yield from chunk

    def iter_batch_chunks(
        self, calls: Sequence[ToolCall], max_concurrency: int = 8
    ) -> Iterator[list[ToolResult]]:
        """``iter_batch``, a committed chunk at a time (so a writer can flush once per chunk)."""
        i = 0
        pool: list[Any] = []  # the worker pool, made on first need
        try:
            while i < len(calls):
                j = i
                while j < len(calls) and self._concurrency_safe(calls[j]):
                    j += 1
                if j - i >= 2 and max_concurrency > 1:
                    for start in range(i, j, BATCH_CHUNK):
                        chunk = calls[start : min(j, start + BATCH_CHUNK)]
                        yield self._run_chunk(pool, chunk, max_concurrency)
                    i = j
                else:  # one exclusive call, or a group that may not run in parallel
                    end = max(j, i + 1)
                    for k in range(i, end):
                        yield [self.run(calls[k])]
                    i = end
        finally:
            if pool:
                pool[0].shutdown(wait=True)

    def _run_chunk(
        self, pool: list[Any], chunk: Sequence[ToolCall], max_workers: int
    ) -> list[ToolResult]:
        # Threads only pay for calls that wait (a subprocess, the network, a slow disk): under
        # the GIL a call that merely computes runs slower in a pool than inline. So calls of a
        # tool whose recent calls were quick run here, in order; the others go to the pool,
        # one task per worker taking the next call until none is left (no hand-off per call),
        # so a slow call never holds back calls another worker could run.
        done: list[tuple[ToolResult, list[TraceRecord]] | None] = [None] * len(chunk)
        slow = [i for i, call in enumerate(chunk) if self._cost.get(call.name, 1.0) > INLINE_S]
        futures = []
        if slow:
            if not pool:
                from concurrent.futures import ThreadPoolExecutor

                pool.append(
                    ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="norma-call")
                )
            indexes = iter(slow)  # next() on it is atomic under the GIL
            workers = min(max_workers, len(slow))

            def work() -> None:
                for i in indexes:
                    done[i] = self._run_deferred(chunk[i], workers)

            futures = [pool[0].submit(work) for _ in range(workers)]
        try:
            if len(slow) < len(chunk):
                is_slow = set(slow)
                for i in range(len(chunk)):
                    if i not in is_slow:
                        done[i] = self._run_deferred(chunk[i])
            for future in futures:
                future.result()
        finally:  # even when interrupted: every call that ran keeps its record
            for future in futures:
                try:
                    future.result()
                except BaseException:  # its own run() recorded it; keep collecting the others
                    continue
            records = [rec for item in done if item is not None for rec in item[1]]
            if records and self.store is not None:
                self.store.append_traces(records)
        return [item[0] for item in done if item is not None]

    def _run_deferred(
        self, call: ToolCall, sharing: int = 1
    ) -> tuple[ToolResult, list[TraceRecord]]:
        sink: list[TraceRecord] = []
        self._local.sink = sink
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.run(call), sink
        finally:
            self._local.sink = None
            # How long the call waited rather than computed. In the pool a call also waits
            # for the GIL while the other `sharing` workers compute, about its own CPU time
            # each: that is not waiting the pool helps with, so it is taken out (else a quick
            # tool, once in the pool, would look slow there and stay). The median of the last
            # five calls ignores one pause (a WAL checkpoint, a GC run).
            wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
            recent = self._recent.setdefault(call.name, collections.deque(maxlen=5))
            recent.append(max(0.0, wall - cpu * sharing))
            self._cost[call.name] = sorted(recent)[len(recent) // 2]

    def _concurrency_safe(self, call: ToolCall) -> bool:
        tool = self.registry.get(call.name)
        return tool is not None and tool.concurrency_safe

    # ------------------------------------------------------------------ helpers
    def _fill_defaults(self, schema: dict[str, Any], tool_input: dict[str, Any]) -> dict[str, Any]:
        cached = self._defaults.get(id(schema))
        if cached is None or cached[0] is not schema:
            defaults = {
                name: prop["default"]
                for name, prop in (schema.get("properties") or {}).items()
                if isinstance(prop, dict)
                and "default" in prop
                and isinstance(prop["default"], (str, int, float, bool))
            }
            cached = (schema, defaults)
            self._defaults[id(schema)] = cached
        defaults = cached[1]
        if not defaults or all(k in tool_input for k in defaults):
            return tool_input
        return {**{k: v for k, v in defaults.items() if k not in tool_input}, **tool_input}

    def _payload(
        self, event: str, ctx: CallContext, tool_name: str, tool_input: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "session_id": ctx.session_id,
            "cwd": str(ctx.cwd),
            "permission_mode": ctx.mode,
            "hook_event_name": event,
            "tool_name": tool_name,
            "tool_input": tool_input,
            "tool_use_id": ctx.tool_use_id,
            "agent": ctx.agent,
        }

    def _invalid(
        self, meta: CallMeta, trail: Trail, stage: str, name: str, issues: list[SchemaIssue]
    ) -> ToolOutput:
        text = f"invalid input for {name}: " + "; ".join(map(str, issues))
        trail.add("refused", by=stage, reason=text)
        meta.stage, meta.decision, meta.reason = stage, None, text
        return ToolOutput.error(text)

    def _denied(
        self, meta: CallMeta, trail: Trail, decision: Decision, by: str | None = None, **detail: Any
    ) -> ToolOutput:
        if not isinstance(decision.reason, str) or len(decision.reason) > HOOK_TEXT_MAX:
            # a hook's or plugin's 60 MB reason; a copy, as the plugin may reuse its Decision
            decision = Decision(
                "deny", decision.stage, hook_text(decision.reason), rule=decision.rule,
                pending_id=decision.pending_id,
            )  # fmt: skip
        self._set_decision(meta, decision)
        meta.status = "denied"
        meta.pending_id = decision.pending_id
        detail.setdefault("reason", decision.reason)
        detail.setdefault("rule", decision.rule.text if decision.rule else None)
        trail.add("denied", by=by or decision.stage, **detail)
        return ToolOutput.error(f"denied: {decision.reason}")

    @staticmethod
    def _set_decision(meta: CallMeta, decision: Decision, asked: Decision | None = None) -> None:
        rule = decision.rule or (asked.rule if asked else None)
        meta.decision = decision.behavior
        meta.stage = decision.stage if asked is None else asked.stage
        meta.reason = decision.reason if asked is None else asked.reason
        meta.rule = rule.text if rule else None
        meta.source = rule.source if rule else None

    def _record(self, call: ToolCall, meta: CallMeta, trail: Trail) -> None:
        if self.store is None:
            return
        assert meta.trace_id is not None
        record = TraceRecord(
            id=meta.trace_id,
            tool_use_id=call.id,
            session_id=self.context.session_id,
            agent=self.context.agent,
            tool=call.name,
            input_digest=meta.input_digest,
            decision=meta.decision,
            stage=meta.stage,
            rule=meta.rule,
            rule_source=meta.source,
            status=meta.status,
            is_error=meta.status not in ("completed",),
            duration_ms=meta.duration_ms,
            spill_path=meta.spill.path if meta.spill else None,
            spill_sha256=meta.spill.sha256 if meta.spill else None,
            events=trail.events,
            reason=meta.reason,
            pending_id=meta.pending_id,
        )
        sink = getattr(self._local, "sink", None)
        if sink is not None:
            sink.append(record)  # committed with its batch chunk (iter_batch)
        else:
            self.store.append_trace(record)


async def _await(value: Any) -> Any:
    return await value


class _Expired(Exception):
    """The executor's own deadline for a call passed (not a TimeoutError the tool raised)."""


def _call_bounded(tool: Tool, tool_input: dict[str, Any], ctx: CallContext, timeout: float) -> Any:
    """``tool.call`` under the tool's ``timeout``; raises ``_Expired`` when it runs past it.

    A sync call runs on a daemon thread joined with the timeout (as ``CallableHook`` runs an
    in-process hook): a thread cannot be killed, so a call that never returns is abandoned
    and dies with the process, but the caller gets its result on time. An async tool needs no
    thread: calling it only makes the coroutine, which the event loop bounds.
    """
    import inspect

    if inspect.iscoroutinefunction(tool.call):
        return tool.call(tool_input, ctx)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = tool.call(tool_input, ctx)
        except BaseException as exc:  # handed to the caller, which decides what it means
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"norma-tool-{tool.name}", daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise _Expired
    if "error" in box:
        raise box["error"]
    value = box.get("value")
    if isinstance(value, Awaitable):  # a sync call that returned an awaitable: what is left
        try:
            return aioloop.run(_await(value), max(0.0, timeout - (time.monotonic() - started)))
        except TimeoutError:
            raise _Expired from None
    return value


HOOK_TEXT_MAX = MAX_TEXT_CHARS  # characters of one hook text (reason, context) kept for the model


def hook_text(text: Any) -> str:
    """A hook's (or plugin's) text for the result or the model, at most HOOK_TEXT_MAX
    characters with its marker: hooks are not bound by the output cap, and a 60 MB reason
    must not become a 60 MB result or prompt."""
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception:
            text = f"<unprintable {type(text).__name__}>"
    return cap_text(text, HOOK_TEXT_MAX)


_BEHAVIORS = ("allow", "deny", "ask")


def known(decision: Any, stage: str) -> Decision:
    """``decision`` when it is a Decision with a known behaviour, else a deny: a verdict
    norma cannot read (``Decision("sure")``, None, a string) never lets a call run."""
    if isinstance(decision, Decision) and decision.behavior in _BEHAVIORS:
        return decision
    what = getattr(decision, "behavior", decision)
    try:
        shown = repr(what)[:100]
    except Exception:
        shown = f"<{type(what).__name__}>"
    rule = getattr(decision, "rule", None)
    return Decision.deny(
        stage,
        f"unreadable {stage} decision {shown}; denied (fail closed)",
        rule=rule if isinstance(rule, RuleRef) else None,
    )


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C, or norma's own SIGTERM/SIGHUP exception: these end the run. Anything else
    that is no Exception (a tool's or plugin's SystemExit, GeneratorExit) is its failure."""
    return isinstance(exc, KeyboardInterrupt | Interrupted)


def describe(exc: BaseException) -> str:
    """``Type: message`` of an extension's exception, bounded, even when its str() raises."""
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable>"
    return hook_text(f"{type(exc).__name__}: {message}")


def _raised(what: str, exc: BaseException) -> str:
    return f"{what} raised {describe(exc)}; denied (fail closed)"


def _internal_error(call: ToolCall, meta: CallMeta, trail: Trail, exc: BaseException) -> ToolOutput:
    """A bug in norma or an extension: still one paired result, with its trace."""
    error = describe(exc)
    trail.add("failed", by="norma", error=error)
    meta.status = "error"
    return ToolOutput.error(f"internal error while running {call.name}: {error}")


def trace_id() -> str:
    """32 hex digits: the time in ns, then 64 random bits. Ids that grow with time land at the
    end of the trace table's unique index instead of at random pages (cheaper per insert)."""
    return f"{time.time_ns():016x}{os.urandom(8).hex()}"


def _digest(value: Any) -> tuple[str, bool]:
    """The input's digest, and whether it is valid text: a lone surrogate (a JSON "\\ud800"
    escape) is not, and no path, rule or shell parser can judge it."""
    try:
        return input_digest(value), True
    except UnicodeEncodeError:
        return input_digest(repr(value)), False
    except (TypeError, ValueError):
        return input_digest(repr(value)), True


def _response_for_hook(output: ToolOutput) -> Any:
    blocks: list[dict[str, Any]] = []
    for b in output.content:
        if b.type == "text":
            blocks.append({"type": "text", "text": b.text})
        elif b.type == "json":
            blocks.append({"type": "json", "json": b.data})
        else:
            blocks.append({"type": "image", "media_type": b.media_type})
    return {"content": blocks, "is_error": output.is_error}


__all__ = ["AskResolver", "ContentBlock", "Executor", "Gate", "deny_ask"]
