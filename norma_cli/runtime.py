"""Assembling a runnable norma from configuration, plugins and command-line options.

``Runtime.build`` is the one place that wires registry, rules, hooks, store, output cap and
executor together; CLI commands and embedding code both go through it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.config import Config, Layer, data_dir, load
from norma_cli.core.contract import CallContext, Decision, Tool, ToolCall
from norma_cli.core.executor import Executor
from norma_cli.core.hooks import DEFAULT_TIMEOUT, CommandHook, HookRunner
from norma_cli.core.output import DEFAULT_MAX_CHARS, OutputCapper
from norma_cli.core.permission import PermissionEngine
from norma_cli.core.record import field, record
from norma_cli.core.registry import ToolRegistry
from norma_cli.errors import ConfigError, StoreError, UsageError
from norma_cli.plugins import PluginHost
from norma_cli.policy.rules import Rule, RuleSet
from norma_cli.session import Session, check_session_id, new_session_id
from norma_cli.store.sqlite import Store

if TYPE_CHECKING:
    from norma_cli.catalog.assembly import Assembly
    from norma_cli.mcp.registry import McpHub
    from norma_cli.policy.intercept import ApprovalDesk, Guard


@record
class Options:
    """Everything the command line can say about how to build the runtime."""

    cwd: Path | None = None
    config: Path | None = None
    agent: str | None = None
    mode: str | None = None
    allow: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    session_id: str | None = None
    interactive: bool | None = None  # None: ask on a TTY when there is one
    with_store: bool = True
    # --no-wait: an ask that goes to the approval queue ends the call at once (pending, exit 4)
    no_wait: bool = False
    # In-process plugins (name, object) registered after the entry-point plugins (embedding, tests).
    plugins: tuple[tuple[str, Any], ...] = ()


@record
class Runtime:
    options: Options
    config: Config
    plugins: PluginHost
    registry: ToolRegistry
    rules: RuleSet
    hooks: HookRunner
    engine: PermissionEngine
    capper: OutputCapper
    session: Session
    store: Store | None
    executor: Executor = field(init=False)
    assembly: Assembly = field(init=False)
    warnings: list[str] = field(default_factory=list)
    guard: Guard | None = None
    mcp: McpHub | None = None  # [mcp.servers]: their tools, connected only when needed
    _desk: ApprovalDesk | None = field(default=None, repr=False)
    _session_started: bool = field(default=False, repr=False)

    @classmethod
    def build(cls, options: Options) -> Runtime:
        cwd = (options.cwd or Path.cwd()).resolve()
        if not cwd.is_dir():
            raise UsageError(f"--cwd {cwd}: not a directory")
        if options.session_id is not None:
            check_session_id(options.session_id)
        cli_layer: dict[str, Any] = {}
        if options.mode:
            cli_layer.setdefault("permissions", {})["mode"] = options.mode
        config = load(cwd, options.config, cli_layer or None)
        agent = None
        if options.agent is not None:
            from norma_cli.catalog.agents import agent_spec

            agent = agent_spec(config, options.agent)  # [agents.NAME]; unknown → exit 2

        plugins = PluginHost()
        plugins.load_entry_points()
        for name, plugin in options.plugins:
            plugins.add(plugin, name)

        registry = ToolRegistry()
        builtin_names = config.get("tools", "builtin")
        from norma_cli.tools.builtin import builtin_factories, validate_builtins

        background = config.get("tools", "background", True)
        factories = builtin_factories(builtin_names, background=background)
        for name, factory in factories.items():
            registry.register_lazy(name, factory)
        plugins.register_tools(registry)
        validate_builtins(factories, config, plugins)  # bad [web]/[search]: exit 2 here

        rules = _rules(config, plugins, agent, options)
        hooks = _hooks(config, plugins, cwd)
        home = data_dir()
        capper = _capper(config, home)

        store, store_error = None, None
        if options.with_store:
            url = config.get("store", "url") or f"sqlite:///{home / 'norma.db'}"
            try:
                store = Store.open(url)
            except StoreError as exc:  # the catalog's [catalog] on_error decides what follows
                store_error = exc

        perms = config.data.get("permissions") or {}
        mode = perms.get("mode", "default")
        if agent is not None and agent.mode and not options.mode:
            mode = agent.effective_mode(config)  # an untrusted project's stricter mode still wins
        roots = tuple((cwd / Path(r).expanduser()).resolve() for r in perms.get("roots", ["."]))
        engine = PermissionEngine(
            rules, plugins.permission_opinion if plugins.has("permission_decision") else None
        )
        session = Session(
            id=options.session_id or new_session_id(),
            cwd=cwd,
            roots=roots,
            mode=mode,
            agent=options.agent,
            data_dir=home,
            capper=capper,
            hooks=hooks,
            config=config,
            plugins=plugins,
            persistent=options.session_id is not None,
            store=store,
        )
        from norma_cli.policy.filescope import ReadFilter, explicit_roots

        session.read_filter = ReadFilter.from_rules(rules)
        session.extra_roots = explicit_roots(rules)
        rt = cls(options, config, plugins, registry, rules, hooks, engine, capper, session, store)
        session.interactive = rt._interactive()
        rt.warnings.extend(config.warnings)
        _check_rule_examples(config.layers, registry, session)
        if store is not None:
            session.activity = rt._record_activity
        rt._build_guard()
        if (config.data.get("mcp") or {}).get("servers"):
            from norma_cli.mcp.registry import attach

            rt.mcp = attach(rt)  # last listings from the pin table; no server is started here
        from norma_cli.catalog.assembly import assemble

        rt.assembly = assemble(rt, agent, store_error)  # the agent's tool set (SPEC §8)
        rt.executor = Executor(
            registry,
            engine,
            hooks,
            capper,
            rt.context(),
            store=store,
            resolve_ask=rt.resolve_ask,
            guard=rt.guard,
            gate=rt.assembly.gate,
            schema_for=rt.assembly.schema_for,
        )
        rt.assembly.bind(rt.executor)
        return rt

    # ------------------------------------------------------------------ interception (SPEC §9)
    def _build_guard(self) -> None:
        """The guard of ``[intercept]`` (only when some tool is a target) and its judge."""
        section = self.config.data.get("intercept") or {}
        if not section.get("tools"):
            return
        from norma_cli.policy import intercept, judge

        runner = judge.build(section.get("judge") or {}, self.plugins, self.store, self.session.id)
        if runner is not None:
            self.warnings.extend(runner.warnings)
        self.guard = intercept.from_config(self.config, self.approval_desk(), runner)

    def approval_desk(self) -> ApprovalDesk | None:
        """The approval queue of ``[intercept.ask]`` (None without a store); built on first use."""
        if self._desk is None and self.store is not None:
            from norma_cli.policy.intercept import DEFAULT_ASK_TIMEOUT_S, ApprovalDesk
            from norma_cli.store.approvals import Approvals

            ask = (self.config.data.get("intercept") or {}).get("ask") or {}
            self._desk = ApprovalDesk(
                Approvals(self.store),
                timeout_s=float(ask.get("timeout_s", DEFAULT_ASK_TIMEOUT_S)),
                on_timeout=ask.get("on_timeout", "deny"),
                wait=not self.options.no_wait,
                notify=_notify,
                stop=self.session.cancelled.is_set,
            )
        return self._desk

    def _queue_permission_asks(self) -> bool:
        """Permission asks nobody else answered enter the approval queue only when the user
        opted in: ``--no-wait``, or an explicit ``[intercept.ask] timeout_s`` (a CI job must
        never sit waiting 300 s by surprise). An answer already given in the queue to exactly
        this call is used either way."""
        ask = (self.config.data.get("intercept") or {}).get("ask") or {}
        return self.options.no_wait or "timeout_s" in ask

    def _record_activity(self, event: str, reason: str | None) -> None:
        assert self.store is not None
        s = self.session
        # a command that never started the session (trace list, approve) is no activity
        if event == "start":
            self._session_started = True
        elif not self._session_started:
            return
        if event == "end" and self.store.failed is not None:
            return  # the store already failed this run, and that failure was reported
        self.store.record_activity(
            session_id=s.id, event=event, reason=reason, agent=s.agent, cwd=str(s.cwd)
        )

    def context(self) -> CallContext:
        s = self.session
        return CallContext(
            session_id=s.id, cwd=s.cwd, roots=s.roots, mode=s.mode, agent=s.agent, session=s
        )

    # ------------------------------------------------------------------ ask resolution
    def resolve_ask(
        self, tool: Tool, call: ToolCall, decision: Decision, ctx: CallContext
    ) -> Decision:
        """A plugin's ``resolve_ask``, then a person at the terminal, then the approval queue
        (see ``_queue_permission_asks``); nobody → deny."""
        if self.plugins.has("resolve_ask"):
            answer = self.plugins.resolve_ask(tool, call.input, decision, ctx)
            if answer is not None:
                return answer
        if self._interactive():
            return _prompt_tty(tool, call, decision)
        desk = self.approval_desk()
        if desk is not None:
            ticket = desk.open(tool=tool.name, tool_input=call.input, ctx=ctx, stage="permission",
                               rule=decision.rule, reason=decision.reason,
                               create=self._queue_permission_asks())  # fmt: skip
            if ticket is not None:
                settled = desk.settle(ticket, ctx)
                if settled.outcome == "pending":
                    return Decision.ask(
                        decision.stage,
                        decision.reason,
                        rule=decision.rule,
                        pending_id=ticket.approval.id,
                    )
                return settled.decision()
        return Decision.deny("ask", f"{decision.reason}; no approver available (not a terminal)")

    def _interactive(self) -> bool:
        if self.options.interactive is not None:
            return self.options.interactive
        return sys.stderr.isatty() and not os.environ.get("CI")

    def close(self, reason: str = "exit") -> None:
        try:
            self.session.close(reason)
        finally:
            if self.mcp is not None:
                self.mcp.close()
            if self.store is not None:
                self.store.close()


def _rules(config: Config, plugins: PluginHost, agent: Any, options: Options) -> RuleSet:
    """Every rule in force, in source order: config layers, plugins, the agent, the flags."""
    rules = RuleSet(_config_rules(config.layers))
    rules.extend(plugins.permission_rules())
    if agent is not None:
        rules.extend(agent.rules)
    for behavior, texts in (("allow", options.allow), ("ask", options.ask), ("deny", options.deny)):
        for text in texts:
            rules.add(Rule.parse(text, behavior, f"--{behavior}"))  # type: ignore[arg-type]
    return rules


def _hooks(config: Config, plugins: PluginHost, cwd: Path) -> HookRunner:
    """Plugin hooks first (registration order), then command hooks from the config layers."""
    hooks = HookRunner()
    plugins.add_event_hooks(hooks)
    for layer in config.layers:
        for event, entries in (layer.effective.get("hooks") or {}).items():
            for i, entry in enumerate(entries):
                hooks.add(
                    CommandHook(
                        event,
                        entry["command"],
                        matcher=entry.get("matcher"),
                        timeout=float(entry.get("timeout", DEFAULT_TIMEOUT)),
                        on_error=entry.get("on_error"),
                        source=layer.source_of(f"hooks.{event}[{i}]"),
                        cwd=str(cwd),
                    )
                )
    return hooks


def _capper(config: Config, home: Path) -> OutputCapper:
    output = config.data.get("output") or {}
    spill_dir = (
        Path(output["spill_dir"]).expanduser() if "spill_dir" in output else home / "outputs"
    )
    return OutputCapper(int(output.get("max_chars", DEFAULT_MAX_CHARS)), spill_dir)


def _config_rules(layers: list[Layer]) -> list[Rule]:
    rules: list[Rule] = []
    for layer in layers:
        perms = layer.effective.get("permissions") or {}
        for behavior in ("deny", "ask", "allow"):
            for i, text in enumerate(perms.get(behavior, [])):
                source = layer.source_of(f"permissions.{behavior}[{i}]", text)
                rules.append(Rule.parse(text, behavior, source))
        for i, entry in enumerate(perms.get("rules", [])):
            source = layer.source_of(f"permissions.rules[{i}].rule")
            rules.append(Rule.parse(entry["rule"], entry["decision"], source))
    return rules


def _check_rule_examples(layers: list[Layer], registry: ToolRegistry, session: Session) -> None:
    """A long-form rule's ``match``/``not_match`` examples must hold, or the config does not load."""
    for layer in layers:
        perms = layer.effective.get("permissions") or {}
        for i, entry in enumerate(perms.get("rules", [])):
            if not entry.get("match") and not entry.get("not_match"):
                continue
            from norma_cli.policy.selftest import check_examples

            source = layer.source_of(f"permissions.rules[{i}].rule")
            rule = Rule.parse(entry["rule"], entry["decision"], source)
            ctx = CallContext(
                session_id=session.id, cwd=session.cwd, roots=session.roots, mode="default"
            )
            failures = check_examples(
                rule, entry.get("match", []), entry.get("not_match", []), ctx, registry
            )
            if failures:
                raise ConfigError(f"{source}: rule {rule.text!r}: {failures[0]}")


def _notify(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _prompt_tty(tool: Tool, call: ToolCall, decision: Decision) -> Decision:
    import json

    try:
        tty = open("/dev/tty", "r+", encoding="utf-8")  # noqa: SIM115
    except OSError:
        return Decision.deny("ask", f"{decision.reason}; no terminal to ask")
    with tty:
        shown = json.dumps(call.input, ensure_ascii=False)
        if len(shown) > 2000:
            shown = shown[:2000] + "…"
        tty.write(f"\nnorma: {tool.name} {shown}\n  {decision.reason}\n  Allow this call? [y/N] ")
        tty.flush()
        answer = tty.readline().strip().lower()
    if answer in ("y", "yes"):
        return Decision.allow("user", "approved at the terminal")
    return Decision.deny("user", "refused at the terminal")


def load_registry_for_lint(ctx_obj: Any) -> list[dict[str, Any]]:
    """Definitions of every registered tool, for ``norma tools lint`` without PATH."""
    rt = ctx_obj.runtime(with_store=False)
    return [t.definition() for t in rt.registry.all()]
