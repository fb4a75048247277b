"""`norma policy replay` (SPEC §16): every call in a recorded transcript re-decided under today's
policy, nothing executed; --expect turns it into a CI gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import RunNorma, results
from fake_providers import FakeProvider, Reply

CALLS = [
    ("call_read", "Read", {"file_path": "README.md"}),
    ("call_rm", "Bash", {"command": "rm -rf build"}),
    ("call_write", "Write", {"file_path": "made.txt", "content": "x"}),
]


def anthropic_messages() -> list[dict]:
    return [
        {"role": "user", "content": "clean up"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]
         + [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in CALLS]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "done"} for i, _, _ in CALLS]},
    ]  # fmt: skip


def openai_messages() -> list[dict]:
    return [
        {"role": "system", "content": "be careful"},
        {"role": "user", "content": "clean up"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in CALLS]},
        *({"role": "tool", "tool_call_id": i, "content": "done"} for i, _, _ in CALLS),
    ]  # fmt: skip


def norma_transcript() -> str:
    records = [
        {"type": "start", "session_id": "s", "resumed": False},
        {
            "type": "message",
            "seq": 1,
            "message": {"role": "user", "content": [{"type": "text", "text": "clean up"}]},
        },
        {"type": "message", "seq": 2, "message": anthropic_messages()[1]},
        {"type": "end", "reason": "finished", "exit_code": 0},
    ]
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.fixture(params=["norma", "anthropic", "openai", "openai-wrapped"])
def recorded(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "recorded.json"
    if request.param == "norma":
        path.write_text(norma_transcript())
    elif request.param == "anthropic":
        path.write_text(json.dumps(anthropic_messages()))
    elif request.param == "openai":
        path.write_text(json.dumps(openai_messages()))
    else:
        path.write_text(json.dumps({"model": "gpt", "messages": openai_messages()}))
    return path


def replay(norma: RunNorma, *args: str) -> list[dict]:
    proc = norma(*args[:-1], "policy", "replay", args[-1], "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_each_format_is_replayed_against_todays_policy(
    norma: RunNorma, tmp_path: Path, recorded: Path
) -> None:
    rows = replay(norma, "--deny", "Bash(rm:*)", str(recorded))
    assert [(r["tool_use_id"], r["tool"], r["decision"]) for r in rows] == [
        ("call_read", "Read", "allow"), ("call_rm", "Bash", "deny"), ("call_write", "Write", "ask"),
    ]  # fmt: skip
    rm = rows[1]
    assert (rm["stage"], rm["rule"], rm["source"]) == ("rule", "Bash(rm:*)", "--deny")
    assert set(rm) >= {"tool_use_id", "tool", "decision", "stage", "rule", "source"}
    # an ask is shown as ask: a replay resolves nothing (no prompt, no approval queue)
    allowed = replay(norma, "--allow", "Write", str(recorded))
    assert [r["decision"] for r in allowed] == ["allow", "ask", "allow"]
    assert not (tmp_path / "made.txt").exists()  # nothing executed
    assert results(norma("trace", "list", "--json").stdout) == []  # nothing recorded


def test_table_output(norma: RunNorma, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(anthropic_messages()))
    proc = norma("--deny", "Bash(rm:*)", "policy", "replay", str(path))
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["TOOL_USE_ID", "TOOL", "DECISION", "STAGE", "RULE", "SOURCE"]
    assert lines[2].split()[:6] == ["call_rm", "Bash", "deny", "rule", "Bash(rm:*)", "--deny"]
    assert "3 call(s)" in proc.stderr and "anthropic format" in proc.stderr


def test_expect_gates_on_differences(norma: RunNorma, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(openai_messages()))
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"call_read": "allow", "call_rm": "allow"}))
    proc = norma("--deny", "Bash(rm:*)", "policy", "replay", str(path), "--expect", str(expect))
    assert proc.returncode == 1
    assert "1 decision(s) differ" in proc.stderr
    assert "call_rm Bash: expected allow, got deny — Bash(rm:*) (--deny)" in proc.stderr
    assert (
        norma("--allow", "Bash", "policy", "replay", str(path), "--expect", str(expect)).returncode
        == 0
    )

    # the --json output of an earlier replay is an expectation too
    baseline = tmp_path / "baseline.json"
    baseline.write_text(norma("--allow", "Bash", "policy", "replay", str(path), "--json").stdout)
    assert (
        norma(
            "--allow", "Bash", "policy", "replay", str(path), "--expect", str(baseline)
        ).returncode
        == 0
    )
    proc = norma(
        "--allow",
        "Bash",
        "--deny",
        "Bash(rm:*)",
        "policy",
        "replay",
        str(path),
        "--expect",
        str(baseline),
    )
    assert proc.returncode == 1 and "call_rm" in proc.stderr

    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"call_gone": "allow"}))
    proc = norma("policy", "replay", str(path), "--expect", str(missing))
    assert proc.returncode == 1 and "call_gone" in proc.stderr and "missing" in proc.stderr


def test_a_calls_batch_is_replayed_too(norma: RunNorma, tmp_path: Path) -> None:
    batch = tmp_path / "calls.jsonl"
    lines = [
        {"type": "tool_use", "id": "a1", "name": "Read", "input": {"file_path": "x"}},
        {
            "id": "o1",
            "type": "function",
            "function": {"name": "Bash", "arguments": '{"command": "rm x"}'},
        },
    ]
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows = replay(norma, "--deny", "Bash(rm:*)", str(batch))
    assert [(r["tool_use_id"], r["tool"], r["decision"]) for r in rows] == [
        ("a1", "Read", "allow"),
        ("o1", "Bash", "deny"),
    ]


def test_unknown_tools_bad_input_and_bad_files(norma: RunNorma, tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_text(json.dumps([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "u1", "name": "Teleport", "input": {}},
        {"type": "tool_use", "id": "u2", "name": "Read", "input": {"path": "wrong key"}},
    ]}]))  # fmt: skip
    rows = replay(norma, str(path))
    assert [(r["decision"], r["stage"]) for r in rows] == [("error", "lookup"), ("error", "schema")]
    assert "unknown tool" in rows[0]["reason"] and "file_path" in rows[1]["reason"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "message"}\nnot json\n')
    proc = norma("policy", "replay", str(bad))
    assert proc.returncode == 2 and "bad.jsonl:2" in proc.stderr
    proc = norma("policy", "replay", str(tmp_path / "absent.json"))
    assert proc.returncode == 2


def test_execute_extra_tool_is_judged_by_its_inner_call(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[custom_tools]]\nname = "greet"\nkind = "command"\nexec = "echo hi {{who}}"\ndeferred = true\n'
                   '[permissions]\ndeny = ["greet"]\n')  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "x1", "name": "ExecuteExtraTool", "input": {"name": "greet", "input": {"who": "a"}}}]}]))  # fmt: skip
    [row] = replay(norma, "--config", str(cfg), str(path))
    assert (row["tool"], row["via"], row["decision"], row["rule"]) == (
        "greet",
        "ExecuteExtraTool",
        "deny",
        "greet",
    )


def test_replay_of_a_recorded_agent_session(
    norma: RunNorma, tmp_path: Path, isolated_env: Path
) -> None:
    (tmp_path / "secret.txt").write_text("s3cret\n")
    script = [Reply(calls=[("c1", "Read", {"file_path": "secret.txt"})]), Reply(text="read it")]
    with FakeProvider("openai", script) as fake:
        cfg = tmp_path / "norma.toml"
        cfg.write_text(fake.toml())
        proc = norma(
            "--config",
            str(cfg),
            "run",
            "-p",
            "read the secret",
            "--session",
            "rec",
            "--output",
            "stream-json",
        )
    assert proc.returncode == 0, proc.stderr
    transcript = isolated_env / "data" / "sessions" / "rec" / "transcript.jsonl"
    events = tmp_path / "events.jsonl"
    events.write_text(proc.stdout)
    for recorded in (transcript, events):  # the transcript, and the stream-json output
        assert [r["decision"] for r in replay(norma, str(recorded))] == ["allow"]
        expect = tmp_path / "expect.json"
        expect.write_text(json.dumps({"c1": "allow"}))
        gate = norma(
            "--deny",
            "Read(./secret.txt)",
            "policy",
            "replay",
            str(recorded),
            "--expect",
            str(expect),
        )
        assert gate.returncode == 1 and "c1 Read: expected allow, got deny" in gate.stderr
