"""The guard (SPEC §9): interception rules, the judge and the approval queue for target tools.

It runs after the permission decision and the PreToolUse hooks (and after re-validation of a
rewritten input), just before the call. Its state machine, every transition recorded in the
call's trace with the time and the deciding party::

    target_check → executing            (not a target)
    target_check → evaluate
    evaluate → executing                (allow rule, or default allow)
    evaluate → denied                   (deny rule, or default deny)
    evaluate → pending                  (ask rule, or default ask)
    evaluate → judge                    (no rule matched and the judge is enabled)
    judge    → executing | denied | pending   (by verdict; failure → on_failure)
    pending  → executing                (approved)
    pending  → denied                   (rejected, cancelled, or expired)

The guard records ``target_check``, ``evaluate``, ``judge`` and ``pending``; the executor
records the transition out (``executing``/``denied``) with the party the guard names, and then
``completed``/``failed``. The guard never loosens the permission decision: it only sees calls
that permission already let through.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from norma_cli.core.contract import Behavior, Decision, RuleRef
from norma_cli.core.digest import canonical_json, input_digest
from norma_cli.core.record import field, record
from norma_cli.policy.rules import Rule, RuleSet

if TYPE_CHECKING:
    from norma_cli.core.contract import CallContext, Tool
    from norma_cli.policy.judge import JudgeRunner
    from norma_cli.store.approvals import Approval, Approvals

DEFAULT_ASK_TIMEOUT_S = 300.0


class Events(Protocol):
    def add(self, state: str, by: str = "", **detail: Any) -> None: ...


@record
class InterceptRule:
    """``[[intercept.rules]]``: rule text (permission specifier syntax), decision, reason."""

    rule: Rule
    reason: str = ""
    # a one-rule set, so matching goes through the same specifier machinery as permissions
    _set: RuleSet = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._set = RuleSet([self.rule])

    @classmethod
    def parse(cls, text: str, decision: Behavior, reason: str, source: str) -> InterceptRule:
        return cls(Rule.parse(text, decision, source), reason)

    @property
    def decision(self) -> Behavior:
        return self.rule.behavior

    def match(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext) -> str | None:
        """The reason this rule covers the call, or None."""
        found = self._set.find(self.rule.behavior, tool, tool_input, ctx)
        if found is None:
            return None
        return self.reason or found.reason or f"intercept rule {self.rule.text} ({self.decision})"


@record
class GuardVerdict:
    """Where the guard sends a call: allow → executing, deny → denied, ask → pending (left
    waiting, ``--no-wait``). ``by`` names the deciding party for the transition's event."""

    decision: Decision
    by: str
    detail: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- approvals
@record
class Settlement:
    """How an ask ended: ``approved``, ``denied`` or left ``pending``."""

    outcome: str  # approved | denied | pending
    approval: Approval
    by: str
    reason: str

    def decision(self, rule: RuleRef | None = None) -> Decision:
        behavior: Behavior = {"approved": "allow", "denied": "deny"}.get(self.outcome, "ask")  # type: ignore[assignment]
        stage = {"expired": "expiry", "cancelled": "cancelled"}.get(self.approval.status, "user")
        return Decision(behavior, stage, self.reason, rule=rule, pending_id=self.approval.id)

    def detail(self) -> dict[str, Any]:
        a = self.approval
        return {"pending_id": a.id, "decider": a.decider, "decided_at": a.decided_at}


@record
class Ticket:
    """An ask entered into the queue: a fresh (or already waiting) request, or an answer given
    earlier to exactly this call (found and used up)."""

    approval: Approval
    answered: Settlement | None = None
    created: bool = False  # this run made the request (so it may cancel it)


class ApprovalDesk:
    """Turns an ask into a durable request, waits for its decision, and uses up grants.

    ``wait`` False is ``--no-wait``: the request is left pending and the call ends (exit 4).
    ``stop`` is polled while waiting; when it turns true (SIGTERM) the request is cancelled.
    """

    def __init__(
        self,
        approvals: Approvals,
        *,
        timeout_s: float = DEFAULT_ASK_TIMEOUT_S,
        on_timeout: Behavior = "deny",
        wait: bool = True,
        notify: Callable[[str], None] | None = None,
        stop: Callable[[], bool] | None = None,
        poll_s: float = 0.05,
    ) -> None:
        self.approvals = approvals
        self.timeout_s = timeout_s
        self.on_timeout = on_timeout
        self.wait = wait
        self.notify = notify
        self.stop = stop
        self.poll_s = poll_s
        # grants used by a permission ask of a call, so the guard's ask of the same call is not
        # asked (and approved) twice: (session, tool_use_id, digest) -> settlement
        self._granted: dict[tuple[str, str, str], Settlement] = {}

    @staticmethod
    def consumer(ctx: CallContext) -> str:
        return f"{ctx.session_id}/{ctx.tool_use_id}"

    def granted_in_call(self, ctx: CallContext, digest: str) -> Settlement | None:
        return self._granted.pop((ctx.session_id, ctx.tool_use_id, digest), None)

    def open(self, *, tool: str, tool_input: dict[str, Any], ctx: CallContext, stage: str,
             rule: RuleRef | None, reason: str, create: bool = True) -> Ticket | None:  # fmt: skip
        """Use up an answer already given to this exact call, else enter (or rejoin) a request.
        With ``create`` False only an existing answer is looked for (None when there is none)."""
        text = canonical_json(tool_input)
        digest = input_digest(tool_input)
        given = self.approvals.take_decided(
            tool=tool, input_digest=digest, agent=ctx.agent, consumer=self.consumer(ctx)
        )
        if given is not None:
            return Ticket(given, self._answer(given, reused=True))
        if not create:
            return None
        approval, created = self.approvals.request(
            tool=tool, input_digest=digest, input_json=text, agent=ctx.agent, session_id=ctx.session_id,
            stage=stage, rule=rule.text if rule else None, rule_source=rule.source if rule else None,
            reason=reason, timeout_s=self.timeout_s,
        )  # fmt: skip
        return Ticket(approval, created=created)

    def settle(self, ticket: Ticket, ctx: CallContext) -> Settlement:
        if ticket.answered is not None:
            return self._remember(ticket.answered, ctx)
        approval = ticket.approval
        if not self.wait:
            return Settlement("pending", approval, "queue", f"pending approval {approval.id}")
        if self.notify is not None:
            left = max(0, round(approval.expires_at - time.time()))
            self.notify(
                f"norma: {approval.tool} needs approval {approval.id} ({approval.reason}); waiting up to {left}s.\n"
                f"       approve: norma approve {approval.id}    refuse: norma approve {approval.id} --deny"
            )
        try:
            final = self.approvals.wait(approval.id, poll_s=self.poll_s, stop=self.stop)
        except BaseException:
            # interrupted (SIGTERM, Ctrl-C): nobody will use an answer now; say so in the queue
            if ticket.created:
                self.approvals.cancel(approval.id)
            raise
        if final.status == "pending":  # stopped (SIGTERM seen by a worker thread)
            if not ticket.created:  # another run waits on the same request: leave it to that run
                reason = f"cancelled (approval {final.id}): the run was stopped"
                return Settlement("denied", final, "requester", reason)
            final = self.approvals.cancel(final.id)
        if final.status in ("approved", "denied") and not self.approvals.consume(
            final.id, self.consumer(ctx)
        ):
            return Settlement(
                "denied", final, "queue", f"approval {final.id} was used by another run"
            )
        return self._remember(self._answer(final, reused=False), ctx)

    def _remember(self, settlement: Settlement, ctx: CallContext) -> Settlement:
        if settlement.outcome == "approved":
            key = (ctx.session_id, ctx.tool_use_id, settlement.approval.input_digest)
            self._granted[key] = settlement
            if len(self._granted) > 256:  # without a guard nobody collects them: keep it bounded
                self._granted.pop(next(iter(self._granted)))
        return settlement

    def _answer(self, a: Approval, *, reused: bool) -> Settlement:
        why = f": {a.decision_reason}" if a.decision_reason else ""
        if a.status == "approved":
            when = " earlier" if reused else ""
            return Settlement(
                "approved",
                a,
                f"user:{a.decider}",
                f"approved{when} by {a.decider} (approval {a.id}){why}",
            )
        if a.status == "denied":
            return Settlement(
                "denied", a, f"user:{a.decider}", f"denied by {a.decider} (approval {a.id}){why}"
            )
        if a.status == "expired":
            if self.on_timeout == "allow":
                return Settlement(
                    "approved", a, "expiry", f"expired (approval {a.id}); on_timeout = allow"
                )
            return Settlement(
                "denied", a, "expiry", f"expired: no decision on approval {a.id} in time"
            )
        return Settlement(
            "denied", a, "requester", f"cancelled (approval {a.id}): the run was stopped"
        )


# ----------------------------------------------------------------------------- the guard
class Guard:
    def __init__(
        self,
        targets: list[str],
        rules: list[InterceptRule],
        *,
        default: Behavior = "allow",
        judge: JudgeRunner | None = None,
        desk: ApprovalDesk | None = None,
    ) -> None:
        self.targets = list(targets)
        self.rules = rules
        self.default = default
        self.judge = judge
        self.desk = desk
        self._target_re = (
            re.compile("|".join(f"(?:{fnmatch.translate(t)})" for t in targets))
            if targets
            else None
        )
        self._is_target: dict[str, bool] = {}

    def is_target(self, name: str) -> bool:
        hit = self._is_target.get(name)
        if hit is None:
            hit = self._is_target[name] = bool(self._target_re and self._target_re.match(name))
        return hit

    # ------------------------------------------------------------------ one call
    def check(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext, events: Events, *,
              permission: Decision, trace_id: str | None = None) -> GuardVerdict:  # fmt: skip
        if not self.is_target(tool.name):
            events.add("target_check", by="guard", target=False)
            return GuardVerdict(permission, "guard")
        events.add("target_check", by="guard", target=True)
        events.add("evaluate", by="guard")
        for rule in self.rules:
            reason = rule.match(tool, tool_input, ctx)
            if reason is not None:
                ref = rule.rule.ref
                detail = {"rule": ref.text, "source": ref.source}
                return self._route(
                    rule.decision,
                    "rule",
                    "intercept",
                    reason,
                    ref,
                    detail,
                    tool,
                    tool_input,
                    ctx,
                    events,
                )
        if self.judge is not None:
            return self._judge(tool, tool_input, ctx, events, permission, trace_id)
        reason = f"no intercept rule matched; default = {self.default}"
        return self._route(
            self.default, "default", "intercept", reason, None, {}, tool, tool_input, ctx, events
        )

    def preview(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        """What the rules alone would say (``--dry-run``): None when the call passes untouched."""
        if not self.is_target(tool.name):
            return None
        for rule in self.rules:
            reason = rule.match(tool, tool_input, ctx)
            if reason is not None:
                return Decision(rule.decision, "intercept", reason, rule=rule.rule.ref)
        if self.judge is not None:
            return Decision.ask(
                "judge", f"no intercept rule matched; the judge {self.judge.name} would be asked"
            )
        return Decision(
            self.default, "intercept", f"no intercept rule matched; default = {self.default}"
        )

    def _judge(self, tool: Tool, tool_input: dict[str, Any], ctx: CallContext, events: Events,
               permission: Decision, trace_id: str | None) -> GuardVerdict:  # fmt: skip
        from norma_cli.policy.judge import JudgeRequest

        assert self.judge is not None
        events.add("judge", by="guard", judge=self.judge.name)
        context = {
            "session_id": ctx.session_id, "tool_use_id": ctx.tool_use_id, "agent": ctx.agent,
            "cwd": str(ctx.cwd), "permission_mode": ctx.mode,
            "permission": {"decision": permission.behavior, "stage": permission.stage,
                           "rule": permission.rule.text if permission.rule else None},
            "tool": {"description": tool.description[:1000], "read_only": tool.read_only,
                     "destructive": tool.destructive},
        }  # fmt: skip
        outcome = self.judge.ask(JudgeRequest(tool.name, tool_input, context, trace_id))
        detail: dict[str, Any] = {
            "judge": outcome.judge,
            "verdict": outcome.decision,
            "ms": round(outcome.duration_ms, 1),
        }
        if outcome.failure is not None:
            detail.update(failure=outcome.failure, on_failure=self.judge.on_failure)
        reason = outcome.reason if outcome.failure else f"judge {outcome.judge}: {outcome.reason}"
        return self._route(outcome.decision, f"judge:{outcome.judge}", "judge", reason, None, detail,
                           tool, tool_input, ctx, events)  # fmt: skip

    def _route(self, behavior: Behavior, by: str, stage: str, reason: str, rule: RuleRef | None,
               detail: dict[str, Any], tool: Tool, tool_input: dict[str, Any], ctx: CallContext,
               events: Events) -> GuardVerdict:  # fmt: skip
        if behavior != "ask":
            return GuardVerdict(
                Decision(behavior, stage, reason, rule=rule), by, {**detail, "reason": reason}
            )
        return self._pending(by, stage, reason, rule, detail, tool, tool_input, ctx, events)

    def _pending(self, by: str, stage: str, reason: str, rule: RuleRef | None, detail: dict[str, Any],
                 tool: Tool, tool_input: dict[str, Any], ctx: CallContext, events: Events) -> GuardVerdict:  # fmt: skip
        if self.desk is None:
            events.add("pending", by=by, reason=reason, **detail)
            why = f"{reason}; needs approval, but there is no store for the approval queue"
            return GuardVerdict(Decision.deny("approval", why, rule=rule), "guard", {"reason": why})
        digest = input_digest(tool_input)
        earlier = self.desk.granted_in_call(ctx, digest)
        if earlier is not None:  # this call's permission ask was approved a moment ago
            events.add("pending", by=by, reason=reason, pending_id=earlier.approval.id, **detail)
            return GuardVerdict(
                earlier.decision(rule), earlier.by, {**earlier.detail(), "reason": earlier.reason}
            )
        ticket = self.desk.open(
            tool=tool.name,
            tool_input=tool_input,
            ctx=ctx,
            stage="intercept",
            rule=rule,
            reason=reason,
        )
        assert ticket is not None
        events.add("pending", by=by, reason=reason, pending_id=ticket.approval.id, **detail)
        try:
            settled = self.desk.settle(ticket, ctx)
        except BaseException:  # SIGTERM / Ctrl-C while waiting: the desk cancelled the request
            events.add("denied", by="requester", pending_id=ticket.approval.id,
                       reason=f"cancelled (approval {ticket.approval.id}): the run was stopped")  # fmt: skip
            raise
        if (
            settled.outcome == "pending"
        ):  # --no-wait: the call ends here, asked by the rule or judge
            return GuardVerdict(
                Decision.ask(stage, reason, rule=rule, pending_id=ticket.approval.id), by, detail
            )
        return GuardVerdict(
            settled.decision(rule), settled.by, {**settled.detail(), "reason": settled.reason}
        )


def from_config(config: Any, desk: ApprovalDesk | None, judge: JudgeRunner | None) -> Guard | None:
    """The guard of ``[intercept]``, or None when no tool is a target (nothing to guard).

    ``[[intercept.rules]]`` accumulate across config layers in layer order (first match wins,
    so a user's rules come before a project's), each remembering its ``file:line``.
    """
    section = config.data.get("intercept") or {}
    targets = section.get("tools") or []
    if not targets:
        return None
    rules: list[InterceptRule] = []
    for layer in config.layers:
        for i, entry in enumerate((layer.effective.get("intercept") or {}).get("rules", [])):
            source = layer.source_of(f"intercept.rules[{i}].rule")
            rules.append(
                InterceptRule.parse(
                    entry["rule"], entry["decision"], entry.get("reason", ""), source
                )
            )
    return Guard(targets, rules, default=section.get("default", "allow"), judge=judge, desk=desk)
