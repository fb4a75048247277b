"""Subagents: the ``Task`` tool starts a child session for an agent key.

The child is a runtime of its own, built for that agent exactly as ``norma --agent KEY`` would
build one: its own assembled tool set (the agent's base tools, skills, catalog binding), its
own rules and mode — never the parent's registry. Its calls go through its own executor and
trace under its own session id. SubagentStart hooks (of the parent) fire first and may refuse
it; the child's final text is the tool result. Nesting is limited to ``MAX_DEPTH``.

Task exists only in ``norma run -p`` runs (it needs the provider) and only when some agent is
configured. It is a base tool like the built-ins: an agent whose ``tools`` list leaves it out
does not get it, and catalog rows and rules apply to it as to any tool.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from norma_cli.core.contract import CallContext, Decision, Tool, ToolOutput

if TYPE_CHECKING:
    from norma_cli.agent.loop import LoopContext
    from norma_cli.runtime import Runtime

MAX_DEPTH = 3
NAME = "Task"


class TaskTool(Tool):
    name = NAME
    prompt = (
        "Use Task to hand a self-contained piece of work to a subagent: give it everything it "
        "needs in the prompt (it does not see this conversation). Its final answer comes back "
        "as the result. A subagent has only its own agent's tools and rules."
    )
    read_only = False
    concurrency_safe = False
    requires_approval = False
    destructive = False

    def __init__(self, agents: dict[str, Any]) -> None:
        listing = "; ".join(
            f"{key} (tools: {', '.join(spec['tools']) if spec.get('tools') is not None else 'all'})"
            for key, spec in sorted(agents.items())
        )
        self.description = (
            "Start a subagent: a separate session acting as one of the configured agents, with "
            f"that agent's own tools and rules, working on the prompt you give it. Agents: {listing}."
        )
        self.input_schema = {
            "type": "object",
            "properties": {
                "agent": {
                    "type": "string",
                    "enum": sorted(agents),
                    "description": "The agent key to start.",
                },
                "prompt": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The task, with all the context it needs.",
                },
                "description": {
                    "type": "string",
                    "description": "What the subagent is for, in 3-5 words.",
                },
            },
            "required": ["agent", "prompt"],
            "additionalProperties": False,
        }

    def check_permissions(self, tool_input: dict[str, Any], ctx: CallContext) -> Decision | None:
        # Starting a subagent does nothing by itself: each of its calls passes its own pipeline.
        return Decision.allow("tool", "a subagent's own calls each pass the policy pipeline")

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        from norma_cli.agent.loop import STATE_KEY

        parent = (getattr(ctx.session, "state", None) or {}).get(STATE_KEY)
        if parent is None:
            return ToolOutput.error("Task needs an agent session (norma run -p)")
        return run_subagent(
            parent,
            tool_input["agent"],
            tool_input["prompt"],
            tool_input.get("description", ""),
            ctx,
        )


def install_task_tool(rt: Runtime, depth: int) -> None:
    """Register Task in an agent session's runtime, through the same catalog resolve and agent
    filter as the tools assembly found (a refused Task stays registered, hidden, so a call gets
    the reason)."""
    agents = rt.config.data.get("agents") or {}
    if not agents or NAME in rt.registry:
        return
    from norma_cli.catalog.resolve import Candidate, resolve

    asm = rt.assembly
    candidate = Candidate(NAME, "builtin", "builtin")
    resolved = resolve(candidate, asm.rows.get(NAME), asm.agent)
    if depth >= MAX_DEPTH:
        deep = f"{NAME} is refused: subagents nest at most {MAX_DEPTH} deep"
        resolved.refusal = f"{resolved.refusal}; {deep}" if resolved.refusal else deep
    asm.candidates[NAME] = candidate
    asm.resolved[NAME] = resolved
    rt.registry.register(TaskTool(agents), hidden=resolved.refusal is not None)
    if resolved.refusal is not None:
        asm.refusals[NAME] = resolved.refusal


def run_subagent(
    parent: LoopContext, agent: str, prompt: str, description: str, ctx: CallContext
) -> ToolOutput:
    from norma_cli.agent.loop import AgentLoop, PromptOptions
    from norma_cli.errors import NormaError
    from norma_cli.runtime import Options, Runtime

    depth = parent.depth + 1
    if depth > MAX_DEPTH:
        return ToolOutput.error(f"subagents nest at most {MAX_DEPTH} deep; do this work yourself")
    rt = parent.runtime
    child_id = f"{rt.session.id[:40]}.{uuid.uuid4().hex[:12]}"
    contexts: list[str] = []
    if rt.hooks.has("SubagentStart"):
        payload = {
            "session_id": rt.session.id, "cwd": str(rt.session.cwd), "hook_event_name": "SubagentStart",
            "permission_mode": rt.session.mode, "agent": agent, "parent_agent": rt.session.agent,
            "agent_session_id": child_id, "prompt": prompt, "description": description, "depth": depth,
            "tool_use_id": ctx.tool_use_id,
        }  # fmt: skip
        for said in rt.hooks.run("SubagentStart", payload, stop_on_block=True):
            if said.blocked:
                return ToolOutput.error(
                    f"subagent {agent} refused by hook {said.hook}: {said.reason}"
                )
            if said.additional_context:
                contexts.append(said.additional_context)
    o = rt.options
    try:
        child = Runtime.build(Options(
            cwd=rt.session.cwd, config=o.config, agent=agent, mode=o.mode, allow=o.allow, ask=o.ask,
            deny=o.deny, session_id=child_id, interactive=o.interactive, with_store=o.with_store,
            no_wait=o.no_wait, plugins=o.plugins,
        ))  # fmt: skip
    except NormaError as exc:
        return ToolOutput.error(f"cannot start subagent {agent}: {exc}")
    child.session.persistent = False  # its background tasks end with it
    options = PromptOptions(
        prompt="\n\n".join([prompt, *contexts]),
        max_turns=parent.options.max_turns,
        max_concurrency=parent.options.max_concurrency,
        output=parent.options.output,
    )
    reason = "exit"
    try:
        outcome = AgentLoop(child, parent.provider, options, emitter=parent.emitter.child(),
                            progress=parent.progress, depth=depth, budget=parent.budget,
                            parent_session_id=rt.session.id).run()  # fmt: skip
    except BaseException:
        reason = "interrupt"
        raise
    finally:
        child.close(reason)
    meta: dict[str, Any] = {
        "agent_session_id": child_id,
        "agent": agent,
        "usage": outcome.usage,
        "turns": outcome.turns,
    }
    if outcome.exit_code == 0:
        return ToolOutput.text(
            outcome.text or "(the subagent finished without a text answer)", **meta
        )
    text = f"subagent {agent} did not finish: {outcome.message}"
    if outcome.text:
        text += f"\n\nIts last answer:\n{outcome.text}"
    return ToolOutput.error(text, **meta)
