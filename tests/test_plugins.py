"""Plugin hooks (SPEC §14): one test per hook (enforced below), docs for each hook (enforced
below), and the example plugin installed with pip and found through its entry point."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli import hookimpl, hookspecs
from norma_cli.core.contract import Decision, ToolCall
from norma_cli.runtime import Options, Runtime

ROOT = Path(__file__).resolve().parents[1]


def runtime(tmp_path: Path, *plugins: tuple[str, Any], **kw: Any) -> Runtime:
    return Runtime.build(
        Options(cwd=tmp_path, plugins=plugins, with_store=False, interactive=False, **kw)
    )


def hookspec_names() -> list[str]:
    return sorted(
        name
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if getattr(fn, "norma_spec", None) is not None
    )


# ----------------------------------------------------------------------------- meta tests
def test_every_hook_has_a_test() -> None:
    tests = {name for name in globals() if name.startswith("test_hook_")}
    missing = [h for h in hookspec_names() if f"test_hook_{h}" not in tests]
    assert hookspec_names() and missing == []


def test_every_hook_is_documented_with_signature() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in hookspec_names():
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"{name}({params})" in readme, f"README plugin guide lacks {name}({params})"


# ----------------------------------------------------------------------------- one per hook
class ToolPlugin:
    @hookimpl
    def register_tools(self, register: Any) -> None:
        def shout(text: str) -> str:
            """Upper-case text."""
            return text.upper()

        register(shout, read_only=True)


def test_hook_register_tools(tmp_path: Path) -> None:
    rt = runtime(tmp_path, ("loud", ToolPlugin()))
    tool = rt.registry.get("shout")
    assert tool is not None and tool.plugin == "loud"
    assert rt.executor.run(ToolCall("t", "shout", {"text": "hi"})).text() == "HI"


def test_hook_register_tools_replacing_builtin_is_recorded(tmp_path: Path) -> None:
    class Replace:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            def Read(file_path: str) -> str:
                """Not the real Read."""
                return "fake"

            register(Read, read_only=True)

    rt = runtime(tmp_path, ("replacer", Replace()))
    assert [(r.name, r.old_plugin, r.new_plugin) for r in rt.registry.replacements] == [
        ("Read", "builtin", "replacer")
    ]


def test_hook_register_skills(tmp_path: Path) -> None:
    folder = tmp_path / "from-folder"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: folded\ndescription: from a folder\n---\nFolder steps.\n"
    )

    class Skills:
        @hookimpl
        def register_skills(self, register: Any) -> None:
            register(name="inline", description="made in code", instructions="Inline steps.")
            register(folder)

    rt = runtime(tmp_path, ("skilled", Skills()))
    assert {n: s.origin for n, s in rt.assembly.skills.items()} == {
        "inline": "plugin:skilled",
        "folded": "plugin:skilled",
    }
    for name, text in (("inline", "Inline steps."), ("folded", "Folder steps.")):
        result = rt.executor.run(ToolCall("t", "Skill", {"name": name}))
        assert result.exit_code() == 0 and text in result.text()


class RulePlugin:
    @hookimpl
    def register_permission_rules(self, register: Any) -> None:
        register("Write", "deny")


def test_hook_register_permission_rules(tmp_path: Path) -> None:
    rt = runtime(tmp_path, ("rules", RulePlugin()), mode="bypassPermissions")
    result = rt.executor.run(ToolCall("t", "Write", {"file_path": "x", "content": ""}))
    assert result.exit_code() == 3 and result.meta.source == "plugin:rules"
    assert not (tmp_path / "x").exists()


def test_register_permission_rules_bad_decision_is_config_error(tmp_path: Path) -> None:
    from norma_cli.errors import ConfigError

    class Bad:
        @hookimpl
        def register_permission_rules(self, register: Any) -> None:
            register("Write", "maybe")

    with pytest.raises(ConfigError, match="decision must be"):
        runtime(tmp_path, ("bad", Bad()))


def opinion(answer: Any) -> Any:
    class Opinion:
        @hookimpl
        def permission_decision(self, tool: Any, call: dict, context: Any) -> Any:
            if isinstance(answer, Exception):
                raise answer
            return answer if tool.name == "Write" else None

    return Opinion()


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["allow"], 0),
        (["allow", "deny"], 3),
        (["deny", "allow"], 3),
        (["allow", "ask"], 3),  # ask beats allow; nobody to ask → denied
        ([None], 3),
        ([RuntimeError("broken")], 3),  # a raising plugin says deny
    ],
)
def test_hook_permission_decision(tmp_path: Path, answers: list[Any], expected: int) -> None:
    plugins = [(f"p{i}", opinion(a)) for i, a in enumerate(answers)]
    rt = runtime(tmp_path, *plugins)
    result = rt.executor.run(ToolCall("t", "Write", {"file_path": "out.txt", "content": "c"}))
    assert result.exit_code() == expected, result.text()


def test_hook_register_judges(tmp_path: Path) -> None:
    seen: list[tuple[str, dict, dict]] = []

    class Judges:
        @hookimpl
        def register_judges(self, register: Any) -> None:
            def strict(tool_name: str, tool_input: dict, context: dict) -> dict:
                seen.append((tool_name, tool_input, context))
                secret = "secret" in tool_input["content"]
                return {"decision": "deny" if secret else "allow", "reason": "checked for secrets"}

            register("strict", strict)

    cfg = tmp_path / "judge.toml"
    cfg.write_text(
        '[intercept]\ntools = ["Write"]\n[intercept.judge]\nenabled = true\nprovider = "plugin:strict"\n'
    )
    rt = runtime(tmp_path, ("judges", Judges()), allow=("Write",), config=cfg)
    assert (
        rt.executor.run(
            ToolCall("t1", "Write", {"file_path": "a.txt", "content": "fine"})
        ).exit_code()
        == 0
    )
    refused = rt.executor.run(
        ToolCall("t2", "Write", {"file_path": "b.txt", "content": "a secret"})
    )
    assert (
        refused.exit_code() == 3
        and refused.meta.stage == "judge"
        and "checked for secrets" in refused.meta.reason
    )
    assert not (tmp_path / "b.txt").exists()
    name, tool_input, context = seen[0]
    assert name == "Write" and tool_input["content"] == "fine"
    assert context["tool_use_id"] == "t1" and context["permission"]["decision"] == "allow"


def test_hook_register_search_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int, str | None]] = []

    class Backends:
        @hookimpl
        def register_search_backends(self, register: Any) -> None:
            def local(query: str, max_results: int, settings: Any) -> list[dict]:
                seen.append((query, max_results, settings.api_key))
                return [{"title": f"About {query}", "url": "https://example.org/a", "snippet": "s"}]

            register("local", local, needs_key=True, key_env="LOCAL_SEARCH_KEY")

    cfg = tmp_path / "search.toml"
    cfg.write_text('[tools]\nbuiltin = ["WebSearch"]\n[search]\nbackend = "local"\n')
    monkeypatch.delenv("LOCAL_SEARCH_KEY", raising=False)
    from norma_cli.errors import ConfigError

    with pytest.raises(ConfigError, match=r"LOCAL_SEARCH_KEY"):  # needs_key: a startup error
        runtime(tmp_path, ("backends", Backends()), config=cfg)
    monkeypatch.setenv("LOCAL_SEARCH_KEY", "k-123")
    rt = runtime(tmp_path, ("backends", Backends()), config=cfg, allow=("WebSearch",))
    result = rt.executor.run(ToolCall("t", "WebSearch", {"query": "norma", "max_results": 3}))
    assert result.exit_code() == 0, result.text()
    assert "About norma" in result.text() and "https://example.org/a" in result.text()
    assert seen == [("norma", 3, "k-123")]


def test_hook_resolve_ask(tmp_path: Path) -> None:
    seen: list[Decision] = []

    class Approver:
        def __init__(self, answer: str) -> None:
            self.answer = answer

        @hookimpl
        def resolve_ask(self, tool: Any, call: dict, decision: Any, context: Any) -> Any:
            seen.append(decision)
            return self.answer

    rt = runtime(tmp_path, ("approver", Approver("allow")), ask=("Write",))
    result = rt.executor.run(ToolCall("t", "Write", {"file_path": "ok.txt", "content": "c"}))
    assert result.exit_code() == 0 and (tmp_path / "ok.txt").read_text() == "c"
    assert seen[0].rule is not None and seen[0].rule.source == "--ask"
    rt = runtime(tmp_path, ("approver", Approver("deny")))
    assert (
        rt.executor.run(ToolCall("t", "Write", {"file_path": "no.txt", "content": "c"})).exit_code()
        == 3
    )


def test_hook_ask_user(tmp_path: Path) -> None:
    seen: list[tuple[str, list[str]]] = []

    class Answerer:
        @hookimpl
        def ask_user(self, question: str, options: list[str], context: Any) -> Any:
            seen.append((question, options))
            return options[1]

    cfg = tmp_path / "tools.toml"
    cfg.write_text('[tools]\nbuiltin = ["AskUser"]\n')
    rt = runtime(tmp_path, ("answerer", Answerer()), config=cfg)
    result = rt.executor.run(
        ToolCall("t", "AskUser", {"question": "Which db?", "options": ["sqlite", "postgres"]})
    )
    assert result.exit_code() == 0 and result.text() == "The user answered: postgres"
    assert seen == [("Which db?", ["sqlite", "postgres"])]


def test_hook_register_providers(tmp_path: Path) -> None:
    import io

    from norma_cli.agent.loop import PromptOptions, run_prompt
    from norma_cli.agent.messages import Message, Text, ToolUse
    from norma_cli.agent.output import Emitter
    from norma_cli.agent.providers import ModelReply, Usage

    seen: list[Any] = []

    class Scripted:  # a model that reads the file it is asked about, then answers
        def __init__(self, settings: Any) -> None:
            self.settings = settings

        def complete(self, request: Any, on_delta: Any = None) -> Any:
            seen.append((self.settings.model, request))
            if len(seen) == 1:
                return ModelReply(
                    Message("assistant", [ToolUse("c1", "Read", {"file_path": "a.txt"})]),
                    "tool_use",
                    Usage(5, 1),
                )
            [result] = request.messages[-1].tool_results()
            return ModelReply(
                Message("assistant", [Text(f"it says: {result.text()}")]), "end_turn", Usage(7, 2)
            )

    class Providers:
        @hookimpl
        def register_providers(self, register: Any) -> None:
            register("scripted", Scripted)

    (tmp_path / "a.txt").write_text("hello from a\n")
    cfg = tmp_path / "p.toml"
    cfg.write_text('[providers.mine]\nkind = "scripted"\nmodel = "m1"\n')
    rt = runtime(tmp_path, ("prov", Providers()), config=cfg)
    out = io.StringIO()
    try:
        outcome = run_prompt(
            rt, PromptOptions("what is in a.txt?"), emitter=Emitter("text", out, io.StringIO())
        )
    finally:
        rt.close()
    assert (
        outcome.exit_code == 0
        and "hello from a" in outcome.text
        and out.getvalue() == outcome.text + "\n"
    )
    assert outcome.provider == "mine" and outcome.usage["total_tokens"] == 15
    model, first = seen[0]
    assert model == "m1" and first.messages[0].text() == "what is in a.txt?"
    assert "Read" in [t.name for t in first.tools]


def test_hook_register_commands(norma: RunNorma, example_plugin: dict[str, str]) -> None:
    proc = norma("example-hello", "Big World", env=example_plugin)
    assert proc.returncode == 0 and proc.stdout.strip() == "hello, big-world"
    # the root --help stays plugin-free and fast
    assert "example-hello" not in norma("--help", env=example_plugin).stdout


def event_plugin(hook: str, answer: Any, seen: list[dict]) -> Any:
    def impl(self: Any, event: dict) -> Any:
        seen.append(event)
        return answer

    impl.__name__ = hook
    cls = type(f"P_{hook}", (), {hook: hookimpl(impl)})
    return cls()


def test_hook_pre_tool_use(tmp_path: Path) -> None:
    seen: list[dict] = []
    answer = {"hookSpecificOutput": {"updatedInput": {"file_path": "b.txt"}}}
    rt = runtime(tmp_path, ("pre", event_plugin("pre_tool_use", answer, seen)))
    (tmp_path / "a.txt").write_text("A")
    (tmp_path / "b.txt").write_text("B")
    result = rt.executor.run(ToolCall("toolu_1", "Read", {"file_path": "a.txt"}))
    assert "B" in result.text() and seen[0]["tool_input"]["file_path"] == "a.txt"
    assert seen[0]["hook_event_name"] == "PreToolUse" and seen[0]["tool_use_id"] == "toolu_1"
    blocker = event_plugin("pre_tool_use", {"decision": "block", "reason": "nope"}, seen)
    rt = runtime(tmp_path, ("pre", blocker))
    assert rt.executor.run(ToolCall("t", "Read", {"file_path": "a.txt"})).exit_code() == 3


def test_hook_post_tool_use(tmp_path: Path) -> None:
    seen: list[dict] = []
    plugin = event_plugin(
        "post_tool_use", {"hookSpecificOutput": {"additionalContext": "remember this"}}, seen
    )
    rt = runtime(tmp_path, ("post", plugin))
    (tmp_path / "a.txt").write_text("A")
    result = rt.executor.run(ToolCall("t", "Read", {"file_path": "a.txt"}))
    assert result.extra_messages[0]["content"] == "remember this"
    assert seen[0]["tool_response"]["is_error"] is False


def test_hook_post_tool_use_failure(tmp_path: Path) -> None:
    seen: list[dict] = []
    rt = runtime(tmp_path, ("fail", event_plugin("post_tool_use_failure", None, seen)))
    result = rt.executor.run(ToolCall("t", "Read", {"file_path": "missing.txt"}))
    assert result.is_error and seen and seen[0]["hook_event_name"] == "PostToolUseFailure"
    assert seen[0]["error"]


def test_hook_session_start(tmp_path: Path) -> None:
    seen: list[dict] = []
    rt = runtime(tmp_path, ("s", event_plugin("session_start", None, seen)))
    rt.session.start()
    assert seen[0]["hook_event_name"] == "SessionStart" and seen[0]["session_id"] == rt.session.id


def test_hook_session_end(tmp_path: Path) -> None:
    seen: list[dict] = []
    rt = runtime(tmp_path, ("s", event_plugin("session_end", None, seen)))
    rt.close("interrupt")
    rt.close("exit")  # fires once
    assert [e["reason"] for e in seen] == ["interrupt"]


def test_session_end_fires_for_one_shot_run(norma: RunNorma, tmp_path: Path) -> None:
    marker = tmp_path / "ended.json"
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[[hooks.SessionEnd]]\ncommand = "cat > {marker}"\n[[hooks.SessionStart]]\ncommand = "cat > {marker}.start"\n'
    )
    (tmp_path / "a.txt").write_text("x")
    norma("--config", str(cfg), "run", "Read", "-i", '{"file_path":"a.txt"}')
    assert json.loads(marker.read_text())["hook_event_name"] == "SessionEnd"
    assert json.loads(Path(f"{marker}.start").read_text())["hook_event_name"] == "SessionStart"


@pytest.mark.parametrize("hook", ["user_prompt_submit", "stop", "subagent_start"])
def test_session_events_reach_plugins(tmp_path: Path, hook: str) -> None:
    from norma_cli.core.hooks import EVENT_HOOKS

    event = next(e for e, h in EVENT_HOOKS.items() if h == hook)
    seen: list[dict] = []
    rt = runtime(tmp_path, ("e", event_plugin(hook, {"decision": "block", "reason": "r"}, seen)))
    [outcome] = rt.hooks.run(event, {"hook_event_name": event, "session_id": "s"})
    assert outcome.blocked and outcome.reason == "r" and outcome.source == "plugin:e"
    assert seen[0]["hook_event_name"] == event


def test_hook_user_prompt_submit(tmp_path: Path) -> None:
    seen: list[dict] = []
    rt = runtime(
        tmp_path,
        (
            "u",
            event_plugin(
                "user_prompt_submit", {"hookSpecificOutput": {"additionalContext": "ctx"}}, seen
            ),
        ),
    )
    [outcome] = rt.hooks.run(
        "UserPromptSubmit", {"hook_event_name": "UserPromptSubmit", "prompt": "hi"}
    )
    assert outcome.additional_context == "ctx" and seen[0]["prompt"] == "hi"


def test_hook_stop(tmp_path: Path) -> None:
    rt = runtime(
        tmp_path, ("st", event_plugin("stop", {"continue": False, "stopReason": "enough"}, []))
    )
    [outcome] = rt.hooks.run("Stop", {"hook_event_name": "Stop"})
    assert outcome.stop and outcome.reason == "enough"


def test_hook_subagent_start(tmp_path: Path) -> None:
    seen: list[dict] = []
    rt = runtime(tmp_path, ("sa", event_plugin("subagent_start", None, seen)))
    rt.hooks.run("SubagentStart", {"hook_event_name": "SubagentStart", "agent": "worker"})
    assert seen[0]["agent"] == "worker"


# ----------------------------------------------------------------------------- a real plugin
@pytest.fixture(scope="session")
def example_plugin(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """pip-install plugins/norma-example into a fresh target dir; env to find it."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT / "plugins" / "norma-example"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return {"PYTHONPATH": str(target), "NORMA_LOAD_PLUGINS": "example"}


def test_example_plugin_found_through_entry_point(
    norma: RunNorma, example_plugin: dict[str, str]
) -> None:
    listed = json.loads(norma("plugins", "list", "--json", env=example_plugin).stdout)
    [plugin] = listed["plugins"]
    assert plugin["name"] == "example" and plugin["version"] == "0.1.0"
    assert plugin["entry_point"] == "norma_example"
    assert {"register_tools", "register_permission_rules", "pre_tool_use"} <= set(plugin["hooks"])
    assert plugin["tools"] == ["slugify"]

    proc = norma("run", "slugify", "-i", '{"text": "Hello, World"}', env=example_plugin)
    assert proc.returncode == 0 and results(proc.stdout)[0]["content"][0]["text"] == "hello-world"
    proc = norma("run", "slugify", "-i", '{"text": "NORMA_EXAMPLE_BLOCK"}', env=example_plugin)
    assert proc.returncode == 3 and results(proc.stdout)[0]["norma"]["source"] == "plugin:example"
    proc = norma(
        "--mode",
        "bypassPermissions",
        "run",
        "Bash",
        "-i",
        '{"command": "shutdown -h now"}',
        env=example_plugin,
    )
    assert proc.returncode == 3 and results(proc.stdout)[0]["norma"]["source"] == "plugin:example"


def test_load_plugins_env_limits_loading(norma: RunNorma, example_plugin: dict[str, str]) -> None:
    env = {**example_plugin, "NORMA_LOAD_PLUGINS": ""}
    assert json.loads(norma("plugins", "list", "--json", env=env).stdout)["plugins"] == []
    env = {**example_plugin, "NORMA_LOAD_PLUGINS": "other"}
    assert json.loads(norma("plugins", "list", "--json", env=env).stdout)["plugins"] == []


def test_plugin_that_fails_to_load_is_a_clear_error(norma: RunNorma, tmp_path: Path) -> None:
    pkg = tmp_path / "site"
    (pkg / "broken_plugin").mkdir(parents=True)
    (pkg / "broken_plugin" / "__init__.py").write_text(
        "raise ImportError('missing dependency xyz')\n"
    )
    dist = pkg / "broken_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[norma]\nbroken = broken_plugin\n")
    proc = norma("tools", "list", env={"PYTHONPATH": str(pkg), "NORMA_LOAD_PLUGINS": "broken"})
    assert (
        proc.returncode == 2
        and "plugin 'broken'" in proc.stderr
        and "missing dependency xyz" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_hookspecs_have_combination_notes() -> None:
    for name in hookspec_names():
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert re.search(
            r"(combine|stops at the first|called|run in registration order|ignored)", doc, re.I
        ), name
