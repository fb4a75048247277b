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


@hookspec(firstresult=True)
def ask_user(question: str, options: list[str], context: Any) -> Any:
    """Answer the ``AskUser`` tool's question on behalf of a person (a chat bot, a web UI...).

    :param question: the question the agent asks.
    :param options: suggested answers (may be empty; the answer need not be one of them).
    :param context: the ``CallContext`` (session id, cwd, agent).
    :return: the answer as a string, or ``None`` to let the next plugin, then the terminal
        (when norma runs interactively) answer. With nobody to answer, AskUser returns an
        error result.

    Stops at the first non-``None`` result. A plugin that raises makes the call an error.
    """


@hookspec
def register_judges(register: Any) -> None:
    """Register LLM-style judges for the interception guard (SPEC §9).

    :param register: ``register(name, judge)`` where ``judge`` is a callable
        ``judge(tool_name, tool_input, context) -> {"decision": "allow"|"deny"|"ask",
        "reason": str}``. ``context`` is a dict: ``session_id``, ``tool_use_id``, ``agent``,
        ``cwd``, ``permission_mode``, ``permission`` (the permission decision) and ``tool``
        (description, ``read_only``, ``destructive``). Select it with
        ``[intercept.judge] provider = "plugin:NAME"``.

    A judge is asked only when no intercept rule matched. It runs on a worker thread with
    ``[intercept.judge] timeout_s``; raising, timing out or returning anything but a verdict
    is a judge failure and follows ``on_failure``. Called once per plugin; results are not
    combined (use the callback; a later registration of a name replaces an earlier one).
    """


@hookspec
def register_search_backends(register: Any) -> None:
    """Register search backends for the ``WebSearch`` tool (SPEC §6).

    :param register: ``register(name, search, *, needs_key=False, key_env=None,
        base_url=None, requires=None)`` where ``search(query, max_results, settings)`` returns
        a list of ``norma_cli.tools.search.SearchHit`` or of dicts with ``title``, ``url`` and
        ``snippet``. ``settings`` carries ``api_key`` (read from ``[search] api_key_env``, else
        ``key_env``), ``base_url`` (``[search] base_url``, else the default given here),
        ``timeout``, ``proxy`` and ``http``: the SSRF-guarded client WebFetch uses
        (``settings.http.request(method, url, params=..., json_body=..., headers=...)``).
        ``needs_key`` makes a missing key a startup error; ``requires`` names a module that
        must be importable. Select it with ``[search] backend = "NAME"``.

    Called once per plugin, when WebSearch is enabled; results are not combined (use the
    callback). A name registered later replaces an earlier one, a built-in's included.
    """


@hookspec
def register_skills(register: Any) -> None:
    """Register skills (instructions a model loads with the ``Skill`` tool).

    :param register: ``register(path)`` with a folder holding a ``SKILL.md`` (or the file
        itself), or ``register(name=..., description=..., instructions=..., mcps=(),
        allowed_tools=())``. ``allowed_tools`` names deferred tools the skill gates: they start
        locked and unlock for the session when the skill is invoked; ``mcps`` does the same for
        the tools of those MCP servers. A skill never grants permission: rules still decide.
        A user or project skill of the same name replaces a plugin's.

    Called once per plugin; results are not combined (use the callback).
    """


@hookspec
def register_providers(register: Any) -> None:
    """Register model provider kinds for agent sessions (``norma run -p``, SPEC §16).

    :param register: ``register(kind, factory)``. ``factory(settings)`` receives the
        ``norma_cli.agent.providers.ProviderSettings`` of a ``[providers.NAME]`` table whose
        ``kind`` is this kind (``name``, ``model``, ``base_url``, ``api_key_env`` and
        ``api_key()``, ``headers``, ``timeout``, ``max_tokens``, ``stream``, ``max_retries``)
        and returns a provider: an object with ``complete(request, on_delta=None)`` taking a
        ``ModelRequest`` (``system``, ``messages``, ``tools`` as ``ToolSpec``\\ s,
        ``max_tokens``) and returning a ``ModelReply`` (the assistant ``Message``, a
        ``stop_reason``, ``Usage``), or raising ``ProviderError`` (the run ends with exit 1).
        ``on_delta(text)``, when given, may be called with streamed text for progress display.

    Called once per plugin, when an agent session starts; results are not combined (use the
    callback). A kind registered later replaces an earlier one, ``openai`` and ``anthropic``
    included.
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

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``prompt``,
        ``transcript_path``.
    :return: ``None``, a block (the prompt is refused), or ``additionalContext``.
        All plugins are called; the first block stops.
    """


@hookspec
def session_start(event: dict[str, Any]) -> Any:
    """SessionStart: a session opens.

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``source``
        (``startup``/``resume``/``subagent``).
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

    :param event: ``session_id``, ``cwd``, ``hook_event_name``, ``stop_hook_active`` (the
        loop already continued for a Stop hook), ``last_assistant_message``,
        ``transcript_path``.
    :return: ``{"decision": "block", "reason": ...}`` continues the loop with the reason as a new
        user message (a blocking continuation); ``{"continue": false}`` stops hard.

    All plugins are called in registration order; a hard stop wins over a continuation.
    """


@hookspec
def subagent_start(event: dict[str, Any]) -> Any:
    """SubagentStart: a child session starts for an agent key (the ``Task`` tool).

    :param event: ``session_id`` (the parent's), ``cwd``, ``hook_event_name``, ``agent`` (the
        child's agent key), ``parent_agent``, ``agent_session_id`` (the child's session id),
        ``prompt``, ``description``, ``depth``, ``tool_use_id``.
    :return: ``None``, a block (the Task call fails with the reason), or ``additionalContext``
        (added to the child's prompt). All plugins are called; the first block stops.
    """
