"""Loading plugins and collecting what they register, each item tagged with its plugin.

Plugins are found through the ``norma`` entry-point group. ``NORMA_LOAD_PLUGINS`` (a comma
list; empty = none) limits which load, so a test run or a CI job never picks up a developer's
own installed plugins by accident.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError

if TYPE_CHECKING:
    import pluggy

    from norma_cli.core.contract import CallContext, Decision, Tool
    from norma_cli.core.hooks import HookRunner
    from norma_cli.core.registry import ToolRegistry
    from norma_cli.policy.rules import Rule

GROUP = "norma"

# What a plugin's code may raise that norma turns into a clear error (or a deny). SystemExit
# and GeneratorExit are not Exceptions: uncaught, a plugin's ``sys.exit(0)`` ended norma with
# exit 0 and no output at all. KeyboardInterrupt stays the user's.
FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit, GeneratorExit)
BEHAVIORS = ("allow", "ask", "deny")

# NORMA_LOAD_PLUGINS names already reported missing (a process may build several runtimes).
_warned_missing: set[str] = set()


@record
class PluginInfo:
    name: str
    version: str
    module: str
    hooks: list[str] = field(default_factory=list)
    entry_point: str = ""


class PluginHost:
    """The pluggy manager plus bookkeeping of which plugin provided what."""

    def __init__(self) -> None:
        self._pm: pluggy.PluginManager | None = None
        self.info: dict[str, PluginInfo] = {}

    @property
    def pm(self) -> pluggy.PluginManager:
        # pluggy (and the importlib.metadata it pulls in) loads only when a plugin exists.
        if self._pm is None:
            import pluggy

            from norma_cli import hookspecs

            self._pm = pluggy.PluginManager("norma")
            self._pm.add_hookspecs(hookspecs)
        return self._pm

    # ------------------------------------------------------------------ loading
    def load_entry_points(self) -> None:
        wanted = _wanted_plugins()
        if wanted == set():
            return
        found = find_entry_points(GROUP)
        if wanted is not None:
            # A typo there silently ran without (say) the policy plugin the operator asked for.
            _warn_missing(wanted - {ep.name for ep in found})
        for ep in found:
            if wanted is not None and ep.name not in wanted:
                continue
            if self.pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
            except FAILURES as exc:
                raise ConfigError(
                    f"plugin {ep.name!r} ({ep.value}) failed to load: {_described(exc)}"
                ) from None
            self.add(plugin, ep.name, version=ep.version, entry_point=ep.value)

    def add(self, plugin: Any, name: str, *, version: str = "", entry_point: str = "") -> None:
        try:
            self.pm.register(plugin, name=name)
        except FAILURES as exc:  # pluggy validates hook names and signatures
            raise ConfigError(f"plugin {name!r} is invalid: {_described(exc)}") from None
        module = getattr(plugin, "__name__", type(plugin).__name__)
        hooks = sorted(h.name for h in self.pm.get_hookcallers(plugin) or [])
        self.info[name] = PluginInfo(name, version, module, hooks, entry_point)

    def remove(self, name: str) -> None:
        if self._pm is None:
            return
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)
        self.info.pop(name, None)

    def _impls(self, hook: str) -> list[Any]:
        if self._pm is None:
            return []
        caller = getattr(self._pm.hook, hook)
        # pluggy returns LIFO-ordered impls for calling; registration order is the reverse.
        return list(reversed(caller.get_hookimpls()))

    def call_registrations(
        self, hook: str, make_register: Callable[[str], Callable[..., Any]]
    ) -> None:
        """Call ``hook(register)`` once per plugin, each with a ``register`` bound to that plugin.

        A plugin that raises is a configuration error naming the plugin (its registrations
        may be rules, and a rule that silently failed to register must not loosen policy).
        """
        for impl in self._impls(hook):
            try:
                impl.function(make_register(impl.plugin_name))
            except ConfigError as exc:
                if f"plugin {impl.plugin_name!r}" in str(exc):
                    raise
                raise ConfigError(f"plugin {impl.plugin_name!r}: {exc}") from None
            except FAILURES as exc:
                raise ConfigError(
                    f"plugin {impl.plugin_name!r} failed in {hook}: {_described(exc)}"
                ) from None

    # ------------------------------------------------------------------ registration hooks
    def register_tools(self, registry: ToolRegistry) -> None:
        def make(plugin: str) -> Callable[..., Any]:
            def register(tool_or_function: Any, name: str | None = None, **meta: Any) -> Any:
                return registry.register(tool_or_function, name, plugin=plugin, **meta)

            return register

        self.call_registrations("register_tools", make)

    def permission_rules(self) -> list[Rule]:
        from norma_cli.policy.rules import Rule

        rules: list[Rule] = []

        def make(plugin: str) -> Callable[..., Any]:
            def register(rule: str, decision: str) -> None:
                if decision not in ("allow", "ask", "deny"):
                    raise ConfigError(
                        f"plugin {plugin!r}: decision must be allow, ask or deny, got {decision!r}"
                    )
                rules.append(Rule.parse(rule, decision, f"plugin:{plugin}"))  # type: ignore[arg-type]

            return register

        self.call_registrations("register_permission_rules", make)
        return rules

    def add_event_hooks(self, runner: HookRunner) -> None:
        from norma_cli.core.hooks import EVENT_HOOKS, CallableHook

        for event, hook_name in EVENT_HOOKS.items():
            for impl in self._impls(hook_name):
                runner.add(
                    CallableHook(event, _event_caller(impl.function), f"plugin:{impl.plugin_name}")
                )

    def register_commands(self, cli: Any) -> None:
        for impl in self._impls("register_commands"):
            try:
                impl.function(cli=cli)
            except FAILURES as exc:
                raise ConfigError(
                    f"plugin {impl.plugin_name!r} failed in register_commands: {_described(exc)}"
                ) from None

    # ------------------------------------------------------------------ decision hooks
    def has(self, hook: str) -> bool:
        return bool(self._impls(hook))

    def permission_opinion(
        self, tool: Tool, call: dict[str, Any], ctx: CallContext
    ) -> Decision | None:
        """Ask every plugin; combine as a veto (deny > ask > allow > no opinion)."""
        from norma_cli.core.contract import Decision

        rank = {"deny": 3, "ask": 2, "allow": 1}
        best: Decision | None = None
        for impl in self._impls("permission_decision"):
            source = f"plugin:{impl.plugin_name}"
            try:
                answer = impl.function(tool=tool, call=call, context=ctx)
                verdict = _as_decision(answer, "plugin", source)
            except FAILURES as exc:
                verdict = Decision.deny(
                    "plugin", f"{source} raised {_described(exc)} (fail closed)"
                )
            if verdict is not None and (
                best is None or rank[verdict.behavior] > rank[best.behavior]
            ):
                best = verdict
        return best

    def resolve_ask(
        self, tool: Tool, call: dict[str, Any], decision: Decision, ctx: CallContext
    ) -> Decision | None:
        from norma_cli.core.contract import Decision

        for impl in self._impls("resolve_ask"):
            source = f"plugin:{impl.plugin_name}"
            try:
                answer = impl.function(tool=tool, call=call, decision=decision, context=ctx)
                verdict = _as_decision(answer, "plugin", source)
            except FAILURES as exc:
                return Decision.deny("plugin", f"{source} raised {_described(exc)} (fail closed)")
            if verdict is not None:
                return verdict
        return None


def _event_caller(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], Any]:
    def call(payload: dict[str, Any]) -> Any:
        return fn(event=payload)  # CallableHook catches even SystemExit (→ the hook's on_error)

    return call


def _described(exc: BaseException) -> str:
    """``Type: message`` of a plugin's exception, even when its ``str`` raises."""
    try:
        text = str(exc) if not isinstance(exc, SystemExit) else repr(exc.code)
    except Exception:
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _as_decision(answer: Any, stage: str, source: str) -> Decision | None:
    """A plugin's answer as a Decision; None for no opinion.

    A ``Decision`` is used only when it is well formed: any other behaviour (``"maybe"``,
    ``"sure"``) or a field of the wrong type is a deny naming the plugin (fail closed), never
    an allow and never "no opinion". Anything else but a behaviour string raises (→ deny).
    """
    from norma_cli.core.contract import Decision, RuleRef

    if answer is None:
        return None
    if isinstance(answer, Decision):
        problem = _decision_problem(answer)
        if problem is None:
            return answer
        return Decision.deny(
            stage, f"{source} answered a Decision with {problem} (fail closed)",
            rule=RuleRef(source, source),
        )  # fmt: skip
    if type(answer) is str and answer in BEHAVIORS:
        return Decision(answer, stage, f"{answer} by {source}", rule=RuleRef(source, source))  # type: ignore[arg-type]
    raise ValueError(f"unexpected answer of type {type(answer).__name__}")


def _decision_problem(d: Decision) -> str | None:
    from norma_cli.core.contract import RuleRef

    # ``type(...) is str``: a str subclass may answer == "allow" to anything.
    if type(d.behavior) is not str or d.behavior not in BEHAVIORS:
        return f"an unknown behaviour {d.behavior!r}" if type(d.behavior) is str else (
            f"a behaviour of type {type(d.behavior).__name__}"
        )  # fmt: skip
    if type(d.stage) is not str or type(d.reason) is not str:
        return "a stage or reason that is not a string"
    if d.rule is not None and not isinstance(d.rule, RuleRef):
        return "a rule that is not a RuleRef"
    if d.updated_input is not None and not isinstance(d.updated_input, dict):
        return "an updated_input that is not an object"
    if not isinstance(d.subcommands, list) or (
        d.pending_id is not None and type(d.pending_id) is not str
    ):
        return "malformed subcommands or pending_id"
    return None


@record(frozen=True)
class EntryPoint:
    name: str
    value: str
    version: str

    def load(self) -> Any:
        from importlib import import_module

        module, _, attr = self.value.partition(":")
        obj = import_module(module.strip())
        for part in attr.strip().split(".") if attr else []:
            obj = getattr(obj, part)
        return obj


def find_entry_points(group: str) -> list[EntryPoint]:
    """Entry points of ``group`` from the ``*.dist-info`` folders on ``sys.path``.

    The same data ``importlib.metadata.entry_points`` reads, without its import cost (tens of
    milliseconds on every ``norma run``); the first distribution of a name on the path wins.
    """
    import sys

    seen: set[str] = set()
    found: list[EntryPoint] = []
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for entry in sorted(names):
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            dist, _, rest = entry.rpartition(".")[0].partition("-")
            key = dist.lower().replace("_", "-")
            if key in seen:
                continue
            seen.add(key)
            try:
                with open(
                    os.path.join(folder or ".", entry, "entry_points.txt"), encoding="utf-8"
                ) as fh:
                    text = fh.read()
            except OSError:
                continue
            entries = _section(text, group)
            if entries:
                version = rest or _version_from_metadata(os.path.join(folder or ".", entry))
                found.extend(EntryPoint(n, v, version) for n, v in entries)
    return found


def _version_from_metadata(dist_dir: str) -> str:
    for name in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(dist_dir, name), encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break
        except OSError:
            continue
    return "?"


def _section(text: str, group: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            inside = line == f"[{group}]"
            continue
        if inside and "=" in line:
            name, _, value = line.partition("=")
            out.append((name.strip(), value.strip()))
    return out


def _warn_missing(names: set[str]) -> None:
    import sys

    for name in sorted(names - _warned_missing):
        _warned_missing.add(name)
        sys.stderr.write(
            f"norma: warning: NORMA_LOAD_PLUGINS names {name!r}, but no installed plugin has"
            f" that name (entry point group {GROUP!r}); running without it\n"
        )


def _wanted_plugins() -> set[str] | None:
    raw = os.environ.get("NORMA_LOAD_PLUGINS")
    if raw is None:
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}
