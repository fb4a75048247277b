"""Subagents (SPEC §16): the Task tool starts a child session with its own agent's tool set and
rules, fires SubagentStart, returns the child's answer, and nests at most three deep."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import RunNorma, results
from fake_providers import FakeProvider, Reply

AGENTS = '[agents.reader]\ntools = ["Read"]\n[agents.nest]\ntools = ["Task"]\n'


def config(tmp_path: Path, fake: FakeProvider, extra: str = "") -> Path:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(fake.toml() + AGENTS + extra)
    return cfg


def task(call_id: str, agent: str, prompt: str) -> tuple[str, str, dict]:
    return (call_id, "Task", {"agent": agent, "prompt": prompt, "description": "delegate"})


def test_a_subagent_cannot_use_a_tool_its_agent_does_not_expose(
    norma: RunNorma, tmp_path: Path, isolated_env: Path
) -> None:
    started = tmp_path / "subagent.json"
    script = [
        Reply(calls=[task("t1", "reader", "Write child.txt with Bash")]),  # parent
        Reply(calls=[("cb", "Bash", {"command": "echo from-child > child.txt"})]),  # child
        Reply(text="I cannot run Bash here."),  # child's answer
        Reply(calls=[("pb", "Bash", {"command": "echo parent-ok"})]),  # parent: it can
        Reply(text="all done"),
    ]
    with FakeProvider("openai", script) as fake:
        cfg = config(tmp_path, fake, f'[[hooks.SubagentStart]]\ncommand = "cat > {started}"\n')
        proc = norma(
            "--config", str(cfg), "--allow", "Bash", "run", "-p", "delegate", "--session", "par"
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "all done\n"
    assert {"Bash", "Task", "Read"} <= set(fake.tool_names(0))
    assert fake.tool_names(1) == ["Read"]  # the child is shown its own agent's tools only
    assert fake.user_texts(1) == ["Write child.txt with Bash"]
    [refused] = fake.results(2)
    assert refused["is_error"] and "not one of agent reader's tools" in refused["text"]
    assert not (tmp_path / "child.txt").exists()
    answer = fake.results(3)[0]
    assert (
        answer["id"] == "t1"
        and answer["text"] == "I cannot run Bash here."
        and not answer["is_error"]
    )
    assert "parent-ok" in fake.results(4)[-1]["text"]

    event = json.loads(started.read_text())
    assert (
        event["hook_event_name"] == "SubagentStart"
        and event["agent"] == "reader"
        and event["session_id"] == "par"
    )
    child = event["agent_session_id"]
    assert child.startswith("par.")
    trace = results(norma("trace", "list", "--agent", "reader", "--json").stdout)
    assert [(e["tool"], e["session_id"], e["status"]) for e in trace] == [("Bash", child, "denied")]
    records = (
        (isolated_env / "data" / "sessions" / child / "transcript.jsonl").read_text().splitlines()
    )
    start = json.loads(records[0])
    assert (
        start["parent_session_id"] == "par" and start["agent"] == "reader" and start["depth"] == 1
    )


def test_subagents_nest_at_most_three_deep(norma: RunNorma, tmp_path: Path) -> None:
    script = [Reply(calls=[task(f"t{d}", "nest", f"level {d + 1}")]) for d in range(4)]
    script += [
        Reply(text="bottom"),
        Reply(text="level 2 done"),
        Reply(text="level 1 done"),
        Reply(text="top"),
    ]
    with FakeProvider("anthropic", script) as fake:
        proc = norma(
            "--config", str(config(tmp_path, fake)), "--agent", "nest", "run", "-p", "go deep"
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "top\n"
    assert [fake.tool_names(i) for i in range(4)] == [["Task"], ["Task"], ["Task"], []]
    [too_deep] = fake.results(4)
    assert (
        too_deep["id"] == "t3"
        and too_deep["is_error"]
        and "nest at most 3 deep" in too_deep["text"]
    )
    assert [fake.results(i)[-1]["text"] for i in (5, 6, 7)] == [
        "bottom",
        "level 2 done",
        "level 1 done",
    ]


def test_subagent_start_hook_can_refuse(norma: RunNorma, tmp_path: Path) -> None:
    refuse = tmp_path / "refuse.sh"
    refuse.write_text("#!/bin/sh\ncat > /dev/null\necho 'no subagents on Fridays' >&2\nexit 2\n")
    refuse.chmod(0o755)
    with FakeProvider(
        "openai", [Reply(calls=[task("t1", "reader", "x")]), Reply(text="fine")]
    ) as fake:
        cfg = config(tmp_path, fake, f'[[hooks.SubagentStart]]\ncommand = "{refuse}"\n')
        proc = norma("--config", str(cfg), "run", "-p", "delegate")
    assert proc.returncode == 0 and len(fake.requests) == 2
    [result] = fake.results(1)
    assert result["is_error"] and "no subagents on Fridays" in result["text"]


def test_task_only_in_agent_sessions_with_agents(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma("run", "Task", "-i", '{"agent": "reader", "prompt": "x"}')
    assert proc.returncode == 1 and "unknown tool: Task" in proc.stdout
    with FakeProvider("openai", [Reply(text="a"), Reply(text="b")]) as fake:
        plain = tmp_path / "plain.toml"
        plain.write_text(fake.toml())
        assert norma("--config", str(plain), "run", "-p", "hi").returncode == 0
        assert (
            norma(
                "--config", str(config(tmp_path, fake)), "run", "--agent", "reader", "-p", "hi"
            ).returncode
            == 0
        )
    assert "Task" not in fake.tool_names(0)  # no agent to start
    assert fake.tool_names(1) == ["Read"]  # reader's tools leave Task out
