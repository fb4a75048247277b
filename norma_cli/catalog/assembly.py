"""Assembling the tool set of one run for one agent, in the seed's order (SPEC §8):

1. code candidates: built-ins and plugin tools (an agent's ``tools`` picks its base set)
2. the agent's visible skills and MCP servers
3. host/custom extras: custom tools from config and operator rows of the catalog
4. merge (a later definition of a name replaces an earlier one, as in the registry)
5. catalog resolve: enabled + binding, description/schema overrides, defaults (resolve.py)
6. runtime conditions: Bash's hints from ``shell`` custom tools; the helpers (``Skill``,
   ``SearchExtraTools``, ``ExecuteExtraTool``) only when there is something for them to do
7. deferred schemas + the unlock set: deferred tools are hidden; tools gated by a visible
   skill stay locked until it is invoked (the gate refuses them, direct or dispatched)

Guard, execute and record are the executor's. Tools the gate refuses stay registered (so a
call gets the reason, not "unknown tool") but hidden from the model.

The catalog costs a run one query (``SELECT`` of the rows; nothing else when the table is
empty), plus one for the session's unlocks when some tool is skill-gated. If the catalog
cannot be read, ``[catalog] on_error`` decides: ``fail`` (default) refuses to run, exit 2;
``fallback`` runs with the code-defined tools and says so on stderr. A custom-tool row that
does not make a valid tool (written by an older norma, or by hand) costs only that tool: it
is refused, with a one-line warning naming the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from norma_cli.catalog.resolve import Candidate, Resolved, resolve
from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from norma_cli.catalog.agents import AgentSpec
    from norma_cli.catalog.custom import CustomToolSpec
    from norma_cli.catalog.deferred import ExecuteExtraToolTool, SearchIndex
    from norma_cli.catalog.skills import Skill
    from norma_cli.catalog.unlocks import UnlockSet
    from norma_cli.core.contract import CallContext, Tool
    from norma_cli.core.executor import Executor
    from norma_cli.core.registry import ToolRegistry
    from norma_cli.mcp.registry import McpHub
    from norma_cli.runtime import Runtime
    from norma_cli.store.catalog_repo import CatalogRepo, CatalogRow

HELPERS = ("Skill", "SearchExtraTools", "ExecuteExtraTool")


@record
class ToolState:
    """One line of ``tools list --explain``: the three states the seed tells apart."""

    name: str
    source: str
    plugin: str | None
    exists: bool
    exposed: bool
    callable: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@record
class Assembly:
    agent: AgentSpec | None
    registry: ToolRegistry
    candidates: dict[str, Candidate]  # every code-defined tool, before the agent's choice
    resolved: dict[str, Resolved]
    rows: dict[str, CatalogRow]
    skills: dict[str, Skill]  # every skill found, visible to this agent or not
    visible_skills: dict[str, Skill]
    unlocks: UnlockSet | None  # None: no tool is skill-gated for this agent
    repo: CatalogRepo | None
    fallback: str | None = None  # why the catalog was not used, under on_error = fallback
    refusals: dict[str, str] = field(default_factory=dict)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    custom_specs: dict[str, CustomToolSpec] = field(default_factory=dict)
    # the code's own description/prompt/schema of tools the catalog or a hint changed (for sync)
    originals: dict[str, dict[str, Any]] = field(default_factory=dict)
    mcp: McpHub | None = None  # MCP servers of this run (their tools' pins, connections)
    _index: SearchIndex | None = None
    _dispatcher: ExecuteExtraToolTool | None = None

    # ------------------------------------------------------------------ executor seams
    def gate(self, name: str, ctx: CallContext) -> str | None:
        """Why ``name`` may not be called in this run (the executor refuses it at lookup).
        An MCP tool's server is connected here, so its live definition meets its pin before
        anything else happens to the call."""
        refusal = self.refusal(name)
        if refusal is None and self.mcp is not None:
            refusal = self.mcp.refusal(name, connect=True)
        return refusal

    def refusal(self, name: str) -> str | None:
        if self.mcp is not None:  # an MCP tool's pin state (last recorded) says the most
            refusal = self.mcp.refusal(name, connect=False)
            if refusal is not None:
                return refusal
        refusal = self.refusals.get(name)
        if refusal is not None:
            return refusal
        skills = self.locked_by(name)
        if skills:
            return (
                f"{name} is locked until the skill {' or '.join(skills)} is invoked "
                f'(call Skill {{"name": "{skills[0]}"}} first)'
            )
        return None

    def admit(self, candidates: dict[str, Candidate]) -> None:
        """Tools registered after assembly (an MCP server listed for the first time during
        this run) are resolved like the others. One of a server only a skill reaches cannot
        be gated any more in this run, so it is refused until a later run (or a sync)."""
        skill_servers = frozenset(
            srv for s in self.visible_skills.values() for srv in s.gated_servers
        )
        for name, c in candidates.items():
            self.candidates[name] = c
            r = self.resolved[name] = resolve(c, self.rows.get(name), self.agent, skill_servers)
            if (
                r.refusal is None
                and c.server in skill_servers
                and not (self.agent is None or self.agent.sees_server(c.server))
            ):
                r.refusal = f"{name} is gated by a skill but was first listed during this run; run `norma catalog sync`"
            if r.refusal:
                self.refusals[name] = r.refusal
        self.registry.hide(n for n in candidates if n in self.refusals)

    def retire(self, names: list[str]) -> None:
        """Tools their source stopped offering during this run (an MCP server's listing)."""
        for name in names:
            self.candidates.pop(name, None)
            self.resolved.pop(name, None)
            self.refusals.pop(name, None)

    def locked_by(self, name: str) -> tuple[str, ...]:
        """The skills that would unlock ``name``, while it is locked."""
        return self.unlocks.locked_by(name) if self.unlocks is not None else ()

    def unlock(self, skill: Skill) -> list[str]:
        if self.unlocks is None or not skill.trusted:
            return []
        return self.unlocks.unlock(skill.name)

    def gated_by(self, skill: str) -> list[str]:
        gated = self.unlocks.gated if self.unlocks is not None else {}
        return sorted(t for t, by in gated.items() if skill in by)

    def schema_for(self, tool: Tool) -> dict[str, Any]:
        return self.schemas.get(tool.name, tool.input_schema)

    def bind(self, executor: Executor) -> None:
        """ExecuteExtraTool dispatches through the same executor (and so the same pipeline)."""
        if self._dispatcher is not None:
            self._dispatcher.executor = executor

    # ------------------------------------------------------------------ views
    def deferred_names(self) -> list[str]:
        return sorted(
            n
            for n, r in self.resolved.items()
            if r.deferred and r.refusal is None and n in self.registry
        )

    def index(self) -> SearchIndex:
        """Built on the first search, then reused: a run that never searches never pays."""
        if self._index is None:
            from norma_cli.catalog.deferred import Entry, SearchIndex

            entries = []
            for name in self.deferred_names():
                tool = self.registry.get(name)
                if tool is not None:
                    entries.append(Entry(name, tool.description or "", self.schema_for(tool)))
            self._index = SearchIndex(entries)
        return self._index

    def exposed(self) -> list[Tool]:
        """The tools whose schemas a model is shown."""
        return [t for t in self.registry.exposed() if self.refusal(t.name) is None]

    def callable_tools(self) -> list[Tool]:
        """Every tool the gate lets through (exposed ones and unlocked deferred ones)."""
        return [t for t in self.registry.all() if self.refusal(t.name) is None]

    def explain(self) -> list[ToolState]:
        states: list[ToolState] = []
        for name in sorted({*self.resolved, *self.rows}):
            r = self.resolved.get(name)
            row = self.rows.get(name)
            if r is None:
                assert row is not None
                why = (
                    "stale: no code defines it any more"
                    if row.status == "stale"
                    else (f"no code defines it (its {row.source} is not loaded)")
                )
                states.append(ToolState(name, row.source, row.plugin, False, False, False, [why]))
                continue
            reasons: list[str] = []
            notes = list(r.notes)
            refusal = self.refusal(name)
            if refusal:
                reasons.append(refusal)
            if r.deferred and refusal is None:
                reasons.append(
                    "deferred: schema hidden; find it with SearchExtraTools, run it with ExecuteExtraTool"
                )
            exposed = (
                name in self.registry and not self.registry.is_hidden(name) and refusal is None
            )
            states.append(
                ToolState(
                    name,
                    r.source,
                    r.plugin,
                    True,
                    exposed,
                    refusal is None and name in self.registry,
                    reasons,
                    notes,
                )
            )
        return states


# ----------------------------------------------------------------------------- assembly
def assemble(rt: Runtime, agent: AgentSpec | None, store_error: StoreError | None) -> Assembly:
    registry = rt.registry
    repo, rows, fallback = _open_catalog(rt, store_error)

    # 1. code candidates
    candidates = _code_candidates(registry)

    # 2. skills and MCP servers the agent sees (MCP: names validated in agents.py; no servers yet)
    skills = _discover_skills(rt)
    visible = {n: s for n, s in skills.items() if agent is None or agent.sees_skill(n)}
    if agent is not None and agent.skills is not None:
        missing = [s for s in agent.skills if s not in skills]
        if missing:
            rt.warnings.append(f"agent {agent.name}: no skill named {', '.join(missing)}")

    # 3. host/custom extras, 4. merge (a later definition of a name replaces an earlier one)
    specs = _config_custom_tools(rt)
    candidates.update(_custom_candidates(specs, rows))
    if skills:
        candidates["Skill"] = Candidate("Skill", "skill", "builtin", base=False)

    # 5. catalog resolve
    skill_servers = frozenset(server for s in visible.values() for server in s.gated_servers)
    resolved = {
        name: resolve(c, rows.get(name), agent, skill_servers) for name, c in candidates.items()
    }
    custom_specs, broken = _custom_specs(candidates, specs, rows)
    for name, why in broken.items():  # refused in this run; every other tool still works
        r = resolved[name]
        bad = f"{name} is refused: its catalog row is invalid ({why})"
        r.refusal = f"{r.refusal}; {bad}" if r.refusal else bad
        import shlex

        word = shlex.quote(name) if name.isprintable() else "NAME"
        fix = (
            f"norma catalog remove {word}"
            if candidates[name].operator_row
            else f"norma catalog set {word} --reset FIELD"
        )
        rt.warnings.append(f"catalog row {name!r} skipped: {why} (`{fix}`)")

    asm = Assembly(
        agent=agent,
        registry=registry,
        candidates=candidates,
        resolved=resolved,
        rows=rows,
        skills=skills,
        visible_skills=visible,
        unlocks=None,
        repo=repo,
        fallback=fallback,
        custom_specs=custom_specs,
    )
    shells = _register_custom(rt, asm)
    _apply_overrides(asm)

    # 6. runtime conditions
    _bash_hints(asm, shells)
    if visible and "Skill" in resolved:
        from norma_cli.catalog.skills import SkillTool

        registry.register(SkillTool(visible, asm.unlock))
    elif "Skill" in resolved:
        resolved["Skill"].refusal = "Skill is not offered: no skill is visible to this agent"

    # 7. deferred schemas + unlock set: a visible skill's `mcps` gate every tool of those
    # servers (deferred, locked until the skill is invoked); its `allowed-tools` gate the
    # deferred tools it names. Every other deferred tool is callable from the start.
    gated: dict[str, tuple[str, ...]] = {}
    servers = [(f"mcp__{server}__", s.name) for s in visible.values() for server in s.gated_servers]
    for name, r in resolved.items() if servers else ():
        by = tuple(skill for prefix, skill in servers if name.startswith(prefix))
        if by and r.refusal is None:
            r.deferred = True
            gated[name] = by
    deferred = asm.deferred_names()
    for skill in visible.values():
        for name in skill.gates:
            if name in deferred and skill.name not in gated.get(name, ()):
                gated[name] = (*gated.get(name, ()), skill.name)
    if gated:
        from norma_cli.catalog.unlocks import UnlockSet

        asm.unlocks = UnlockSet(gated, rt.session.id, repo)
    if deferred:
        _add_deferred_helpers(asm)
    registry.hide([*deferred, *(n for n, r in resolved.items() if r.refusal)])
    asm.refusals = {n: r.refusal for n, r in resolved.items() if r.refusal}
    hub = getattr(rt, "mcp", None)
    if hub is not None:
        asm.mcp = hub
        hub.bind(asm)
    if repo is not None and not repo.writable:  # a peek for a store-less command: done with it
        repo.close()
        asm.repo = None
    return asm


def _config_custom_tools(rt: Runtime) -> dict[str, CustomToolSpec]:
    if not any(layer.effective.get("custom_tools") for layer in rt.config.layers):
        return {}  # the usual case: the custom tool machinery is not even imported
    from norma_cli.catalog.custom import from_config

    return {s.name: s for s in from_config(rt.config)}


def _custom_candidates(
    specs: dict[str, CustomToolSpec], rows: dict[str, CatalogRow]
) -> dict[str, Candidate]:
    out = {
        name: Candidate(name, "custom", "custom", spec, spec.deferred, spec.agents, base=False)
        for name, spec in specs.items()
    }
    for row in rows.values():  # custom tools that live only in the catalog (`catalog add`)
        if (
            row.created_by == "operator"
            and row.custom_kind
            and row.name not in specs
            and row.status != "stale"
        ):
            out[row.name] = Candidate(
                row.name,
                "custom",
                "custom",
                None,
                row.deferred,
                row.agents,
                base=False,
                operator_row=True,
            )
    return out


def _open_catalog(
    rt: Runtime, store_error: StoreError | None
) -> tuple[CatalogRepo | None, dict[str, CatalogRow], str | None]:
    from norma_cli.store.catalog_repo import CatalogRepo

    on_error = rt.config.get("catalog", "on_error", "fail")
    repo: CatalogRepo | None = None
    try:
        if store_error is not None:
            raise store_error
        if rt.store is not None:
            repo = CatalogRepo(rt.store)
        else:
            repo = CatalogRepo.read_only(_store_path(rt))
        return repo, (repo.rows(for_run=True) if repo is not None else {}), None
    except StoreError as exc:
        reason = str(exc).replace("\n", " ")
        if on_error != "fallback" and store_error is not None:
            # the store itself is the problem (and every command that builds a runtime meets
            # it, `trace list` included): name it first, the catalog only as its consequence
            raise ConfigError(
                f"{reason} (so the tool catalog cannot be read either; refusing to run:"
                ' [catalog] on_error = "fallback" runs with the code-defined tools, unrecorded)'
            ) from None
        if on_error != "fallback":
            raise ConfigError(
                f'the tool catalog cannot be read ({reason}); refusing to run ([catalog] on_error = "fail";'
                ' set it to "fallback" to run with the code-defined tools)'
            ) from None
        rt.warnings.append(
            f"the tool catalog cannot be read ({reason}); running with the code-defined tools"
            ' ([catalog] on_error = "fallback")'
            + ("; calls are not recorded in the trace" if store_error is not None else "")
        )
        return None, {}, reason


def _store_path(rt: Runtime) -> Path:
    from norma_cli.store.sqlite import sqlite_path

    url = rt.config.get("store", "url") or f"sqlite:///{rt.session.data_dir / 'norma.db'}"
    return sqlite_path(url)


def _code_candidates(registry: ToolRegistry) -> dict[str, Candidate]:
    from norma_cli.tools.builtin import BUILTINS

    replaced = {r.name for r in registry.replacements}
    out: dict[str, Candidate] = {}
    for name in registry.names():
        if name.startswith("mcp__"):  # an MCP tool: do not connect its server just to ask
            server = name.split("__")[1]
            out[name] = Candidate(name, "mcp", f"mcp:{server}", base=False, server=server)
            continue
        if name in BUILTINS and name not in replaced:  # still lazy: do not build it to ask
            out[name] = Candidate(name, "builtin", "builtin")
            continue
        tool = registry.get(name)
        plugin = tool.plugin if tool is not None else "builtin"
        source = "builtin" if plugin == "builtin" else "plugin"
        out[name] = Candidate(name, source, plugin, deferred=bool(getattr(tool, "deferred", False)))
    return out


def _discover_skills(rt: Runtime) -> dict[str, Skill]:
    from norma_cli.config import find_project_config, user_config_path

    cwd = rt.session.cwd
    project = find_project_config(cwd)
    user_dir = user_config_path().parent / "skills"
    if (
        not rt.plugins.has("register_skills")
        and project is None
        and not user_dir.is_dir()
        and not any((d / ".norma" / "skills").is_dir() for d in (cwd, *cwd.parents))
    ):
        return {}  # the common case: a few stats, no imports
    from norma_cli.catalog.skills import discover, plugin_register

    plugin_skills: list[Skill] = []
    if rt.plugins.has("register_skills"):
        rt.plugins.call_registrations(
            "register_skills", lambda plugin: plugin_register(plugin, plugin_skills)
        )
    trusted = any(layer.kind == "project" and layer.trusted for layer in rt.config.layers)
    found = discover(
        cwd=cwd,
        user_dir=user_dir,
        project_config=project,
        project_trusted=trusted,
        plugin_skills=plugin_skills,
    )
    rt.warnings.extend(found.notes)
    return found.skills


def _custom_specs(
    candidates: dict[str, Candidate], specs: dict[str, CustomToolSpec], rows: dict[str, CatalogRow]
) -> tuple[dict[str, CustomToolSpec], dict[str, str]]:
    """The custom tools to build, and the ones whose catalog row does not make a valid tool
    (name → why). A bad row (written by an older norma, or by hand) costs its own tool, not
    every command: refusing to start would also stop the `catalog` commands that repair it."""
    if not specs and not any(c.operator_row for c in candidates.values()):
        return {}, {}
    from norma_cli.catalog.custom import CustomToolSpec, check

    out: dict[str, CustomToolSpec] = {}
    broken: dict[str, str] = {}
    for name, c in candidates.items():
        row = rows.get(name)
        if c.custom is not None:
            spec = c.custom.with_row(row) if row is not None and row.edited else c.custom
        elif c.operator_row and row is not None:
            spec = CustomToolSpec(name, row.custom_kind or "").with_row(row, all_fields=True)
        else:
            continue
        if spec is not c.custom:
            try:
                spec = check(spec)
            except ConfigError as exc:
                broken[name] = str(exc).removeprefix("catalog: ")
                if c.custom is None:
                    continue
                spec = c.custom  # registered as the config defines it, refused by the gate
        out[name] = spec
    return out, broken


def _register_custom(rt: Runtime, asm: Assembly) -> list[CustomToolSpec]:
    """Register the callable custom tools; return the ``shell`` ones that are enabled and bound."""
    if not asm.custom_specs:
        return []
    from norma_cli.catalog.custom import build_tool

    hints: list[CustomToolSpec] = []
    for name, spec in asm.custom_specs.items():
        tool = build_tool(spec, rt.engine)
        if tool is None:  # shell: a hint for Bash, never callable
            r = asm.resolved[name]
            if r.refusal is None:
                hints.append(spec)
            r.refusal = "; ".join(
                filter(
                    None,
                    [
                        r.refusal,
                        f"{name} is a shell hint (added to Bash's description), not a callable tool",
                    ],
                )
            )
            continue
        asm.registry.register(tool, plugin="custom")
    return hints


def _apply_overrides(asm: Assembly) -> None:
    """Catalog descriptions and schemas replace the code's, on the tool itself (so every
    consumer of its definition sees them) and for validation (``schema_for``)."""
    for name, r in asm.resolved.items():
        if r.description is None and r.schema is None:
            continue
        tool = asm.registry.get(name)
        if tool is None:
            continue
        _keep_original(asm, tool)
        if r.description is not None:
            tool.description = r.description
        if r.schema is not None:
            tool.input_schema = r.schema
            asm.schemas[name] = r.schema


def _keep_original(asm: Assembly, tool: Tool) -> None:
    asm.originals.setdefault(
        tool.name,
        {"description": tool.description, "prompt": tool.prompt, "input_schema": tool.input_schema},
    )


def _bash_hints(asm: Assembly, shells: list[CustomToolSpec]) -> None:
    bash_state = asm.resolved.get("Bash")
    if not shells or bash_state is None or bash_state.refusal or "Bash" not in asm.registry:
        for s in shells:
            asm.resolved[s.name].notes.append("hint not shown: Bash is not assembled for this run")
        return
    from norma_cli.catalog.custom import shell_hints

    bash = asm.registry.get("Bash")
    assert bash is not None
    hint = shell_hints(shells)
    _keep_original(asm, bash)
    bash.description = f"{bash.description}\n\n{hint}"
    bash.prompt = f"{bash.prompt}\n\n{hint}" if bash.prompt else hint
    for s in shells:
        asm.resolved[s.name].notes.append("hint added to Bash's description")


def _add_deferred_helpers(asm: Assembly) -> None:
    from norma_cli.catalog.deferred import ExecuteExtraToolTool, SearchExtraToolsTool

    for name in ("SearchExtraTools", "ExecuteExtraTool"):
        c = Candidate(name, "builtin", "builtin", base=False)
        asm.candidates[name] = c
        asm.resolved[name] = resolve(c, asm.rows.get(name), asm.agent)

    asm.registry.register(SearchExtraToolsTool(asm.index, asm.locked_by))
    dispatcher = ExecuteExtraToolTool()
    asm._dispatcher = dispatcher
    asm.registry.register(dispatcher)
