"""Plugin hook specifications (pluggy project ``norma``, entry-point group ``norma``).

A plugin is a module (or object) with functions decorated by ``norma_cli.hookimpl``. Each hook is
called once per plugin, so everything a plugin registers remembers which plugin it came from.
Registration hooks receive a ``register`` callback instead of returning lists.

The event hooks (``pre_tool_use`` ... ``subagent_start``) receive the same JSON event object an
external command hook reads on stdin, and may return what such a command would print: ``None``
(no opinion), ``{"decision": "block", "reason": ...}``, ``{"continue": false}``, or
``{"hookSpecificOutput": {"permissionDecision": ..., "updatedInput": ..., "additionalContext":
...}}``. An exception, a hang past the hook timeout (60 s) or an unreadable answer follows the
event's ``on_error`` default: ``block`` for ``pre_tool_use`` and ``user_prompt_submit``,
``ignore`` otherwise.
"""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("norma")
hookimpl = pluggy.HookimplMarker("norma")


@hookspec
def register_tools(register: Any) -> None:
    """Register tools.

    :param register: ``register(tool_or_function, name=None, **metadata)``. Pass a
        ``norma_cli.Tool`` instance, or a plain typed function (its signature and docstring
        become the input schema and description). Metadata keywords set ``read_only``,
        ``concurrency_safe``, ``requires_approval``, ``raw_input``, ``destructive``; unset
        metadata fails closed (mutating, exclusive, approval-required). A name that already
        exists replaces the earlier tool, and the replacement is recorded.

    Called once per plugin; results are not combined (use the callback).
    """


@hookspec
def register_permission_rules(register: Any) -> None:
    """Register permission rules, with the plugin recorded as their source.

    :param register: ``register(rule, decision)`` where ``rule`` uses the rule syntax of
        ``[permissions]`` (``"Bash(git push:*)"``) and ``decision`` is ``"allow"``, ``"ask"``
        or ``"deny"``. Deny and ask rules accumulate with every other source.

    Called once per plugin; results are not combined (use the callback).
    """


@hookspec
def permission_decision(tool: Any, call: dict[str, Any], context: Any) -> Any:
    """Give an opinion on one call before it runs.

    :param tool: the ``Tool`` about to run.
    :param call: the validated input object.
    :param context: the ``CallContext`` (session id, cwd, roots, mode, agent).
    :return: ``"allow"``, ``"ask"``, ``"deny"``, a ``Decision``, or ``None`` for no opinion.

    All plugins are asked; the answers combine as a veto: deny > ask > allow > no opinion.
    A deny is applied with deny rules (stage 1), an ask with ask rules (stage 3), an allow with
    allow rules (stage 4). A plugin that raises is taken to say deny.
    """


@hookspec(firstresult=True)
def resolve_ask(tool: Any, call: dict[str, Any], decision: Any, context: Any) -> Any:
    """Answer a call whose permission decision is *ask* (an approver UI, a chat bot...).

    :param tool: the ``Tool``.
    :param call: the final input object (after any rewrite).
    :param decision: the ``Decision`` that asked, with its reason and rule.
    :param context: the ``CallContext``.
    :return: ``"allow"``, ``"deny"``, a ``Decision``, or ``None`` to let the next resolver
        (a TTY prompt, then the approval queue) answer.

    Stops at the first non-``None`` result. A plugin that raises is taken to say deny.
    """


@hookspec
def register_commands(cli: Any) -> None:
    """Add commands to the ``norma`` command group.

    :param cli: the root ``click.Group``; call ``cli.add_command(...)``.

    Called once per plugin when a command name is not a built-in one: plugin commands load
    when first invoked (``norma --help`` stays fast and does not import plugins).
    """


@hookspec
def pre_tool_use(event: dict[str, Any]) -> Any:
    """PreToolUse: before a call runs, after the permission decision.

    :param event: ``session_id``, ``cwd``, ``permission_mode``, ``hook_event_name``,
        ``tool_name``, ``tool_input``, ``tool_use_id``, ``agent``.
    :return: ``None``, a block, or ``hookSpecificOutput`` with ``permissionDecision``
        (``deny`` blocks, ``ask`` escalates an allow to ask; ``allow`` is recorded but never
        overrides an ask or deny rule) and ``updatedInput`` (re-validated against the schema
        and the permission rules before use).

    Run in registration order: the first block stops the call; the last non-empty rewrite wins.
    """


@hookspec
def post_tool_use(event: dict[str, Any]) -> Any:
    """PostToolUse: after a call succeeded.

    :param event: as ``pre_tool_use`` plus ``tool_response`` (content blocks, ``is_error``).
    :return: ``None`` or ``additionalContext`` / a block reason, added as an extra message.
        Cannot un-run the call. All plugins are called.
    """


@hookspec
def post_tool_use_failure(event: dict[str, Any]) -> Any:
    """PostToolUseFailure: after a call returned an error or raised.

    :param event: as ``pre_tool_use`` plus ``error`` (the error text).
    :return: ``None`` or ``additionalContext``. All plugins are called.
    """


@hookspec
def user_prompt_submit(event: dict[str, Any]) -> Any:
    """UserPromptSubmit: before a prompt reaches the model (agent sessions).

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``prompt``.
    :return: ``None``, a block (the prompt is refused), or ``additionalContext``.
        All plugins are called; the first block stops.
    """


@hookspec
def session_start(event: dict[str, Any]) -> Any:
    """SessionStart: a session opens.

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``source``
        (``startup``/``resume``).
    :return: ``None`` or ``additionalContext``. All plugins are called.
    """


@hookspec
def session_end(event: dict[str, Any]) -> Any:
    """SessionEnd: a session closes — on normal exit, on error and on Ctrl-C.

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``reason``
        (``exit``/``error``/``interrupt``).
    :return: ignored. All plugins are called.
    """


@hookspec
def stop(event: dict[str, Any]) -> Any:
    """Stop: the model ended its turn (agent sessions).

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``stop_hook_active``.
    :return: ``{"decision": "block", "reason": ...}`` continues the loop with the reason as a new
        user message (a blocking continuation); ``{"continue": false}`` stops hard.
    """


@hookspec
def subagent_start(event: dict[str, Any]) -> Any:
    """SubagentStart: a child session starts for an agent key.

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``agent``.
    :return: ``None`` or ``additionalContext``. All plugins are called.
    """
