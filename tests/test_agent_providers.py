"""Providers of `norma run -p` (SPEC §16) against loopback servers speaking each wire format:
streaming and not, parallel tool calls, retries on 429/5xx honouring Retry-After, errors,
provider selection, and the API key kept out of every record."""

from __future__ import annotations

import json
import time
from email.utils import formatdate
from pathlib import Path

import pytest
from conftest import RunNorma, results
from fake_providers import Broken, FakeProvider, Reply, Status

from norma_cli.agent.providers.base import retry_after_seconds

KEY = "sk-test-7c1e4b9a2f6d"
ENV = {"FAKE_KEY": KEY}
KINDS = ["openai", "anthropic"]


def config(tmp_path: Path, fake: FakeProvider, extra: str = "", **provider: object) -> Path:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(fake.toml(api_key_env="FAKE_KEY", **provider) + extra)
    return cfg


def assert_key_nowhere(home: Path, *texts: str) -> None:
    for text in texts:
        assert KEY not in text
    for path in (home / "data").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("kind", KINDS)
def test_read_then_answer(
    norma: RunNorma, tmp_path: Path, isolated_env: Path, kind: str, stream: bool
) -> None:
    (tmp_path / "notes.txt").write_text("the answer is 42\n")
    script = [
        Reply(calls=[("call_1", "Read", {"file_path": "notes.txt"})]),
        Reply(text="The file says 42."),
    ]
    with FakeProvider(kind, script) as fake:
        cfg = config(tmp_path, fake, stream=stream)
        proc = norma(
            "--config",
            str(cfg),
            "run",
            "-p",
            "What does notes.txt say?",
            "--session",
            "s1",
            env=ENV,
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The file says 42.\n"
    assert len(fake.requests) == 2 and all(
        bool(r.body.get("stream")) is stream for r in fake.requests
    )
    first = fake.requests[0]
    if kind == "openai":
        assert first.headers["authorization"] == f"Bearer {KEY}"
        assert first.body["messages"][0]["role"] == "system"
    else:
        assert first.headers["x-api-key"] == KEY and first.headers["anthropic-version"]
        assert first.body["system"] and first.body["max_tokens"] > 0
    assert "Read" in fake.tool_names(0) and "What does notes.txt say?" in fake.user_texts(0)
    [result] = fake.results(1)
    assert (
        result["id"] == "call_1" and "the answer is 42" in result["text"] and not result["is_error"]
    )

    trace = norma("trace", "list", "--session", "s1", "--json")
    assert [
        (e["tool"], e["session_id"], e["tool_use_id"], e["status"]) for e in results(trace.stdout)
    ] == [("Read", "s1", "call_1", "completed")]
    assert_key_nowhere(isolated_env, proc.stderr, proc.stdout)
    llm = norma("trace", "records", "llm", "--session", "s1", "--json")
    assert llm.returncode == 0 and llm.stdout.count('"agent"') == 2


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_tool_calls_run_as_one_batch(norma: RunNorma, tmp_path: Path, kind: str) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text(f"content of {name}\n")
    calls = [(f"call_{n}", "Read", {"file_path": f"{n}.txt"}) for n in ("a", "b", "c")]
    with FakeProvider(
        kind, [Reply(text="Reading all three.", calls=calls), Reply(text="done")]
    ) as fake:
        proc = norma("--config", str(config(tmp_path, fake)), "run", "-p", "read them", env=ENV)
    assert proc.returncode == 0, proc.stderr
    got = fake.results(1)
    assert [r["id"] for r in got] == ["call_a", "call_b", "call_c"]  # paired, in call order
    assert all(f"content of {n}" in r["text"] for n, r in zip("abc", got, strict=True))
    if kind == "anthropic":  # all results in one user turn, right after the assistant's calls
        messages = fake.requests[1].body["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        assert [b["type"] for b in messages[1]["content"]] == [
            "text",
            "tool_use",
            "tool_use",
            "tool_use",
        ]
    else:
        roles = [m["role"] for m in fake.requests[1].body["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "tool", "tool"]


@pytest.mark.parametrize("kind", KINDS)
def test_429_retry_after_is_honoured(norma: RunNorma, tmp_path: Path, kind: str) -> None:
    script = [
        Status(429, {"Retry-After": "1"}, {"error": {"message": "slow down"}}),
        Reply(text="ok"),
    ]
    with FakeProvider(kind, script) as fake:
        proc = norma("--config", str(config(tmp_path, fake)), "run", "-p", "hi", env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n" and len(fake.requests) == 2
    gap = fake.requests[1].at - fake.requests[0].at
    assert 0.9 <= gap < 10, gap


def test_500_five_times_is_exit_1_with_a_clear_message(norma: RunNorma, tmp_path: Path) -> None:
    script = [Status(500, {"Retry-After": "0"}, {"error": {"message": "upstream exploded"}})] * 5
    with FakeProvider("openai", script) as fake:
        proc = norma("--config", str(config(tmp_path, fake)), "run", "-p", "hi", env=ENV)
    assert proc.returncode == 1
    assert len(fake.requests) == 5
    [line] = proc.stderr.strip().splitlines()
    assert "HTTP 500" in line and "upstream exploded" in line and "gave up after 5 attempts" in line
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_backoff_without_retry_after_and_max_retries(norma: RunNorma, tmp_path: Path) -> None:
    with FakeProvider("anthropic", [Status(503), Reply(text="back")]) as fake:
        proc = norma(
            "--config", str(config(tmp_path, fake, max_retries=1)), "run", "-p", "hi", env=ENV
        )
    assert proc.returncode == 0 and proc.stdout == "back\n", proc.stderr
    assert (
        0.3 <= fake.requests[1].at - fake.requests[0].at < 5
    )  # the first backoff step (0.5 s ± jitter)
    with FakeProvider("anthropic", [Status(503), Status(503)]) as fake:
        proc = norma(
            "--config", str(config(tmp_path, fake, max_retries=1)), "run", "-p", "hi", env=ENV
        )
    assert (
        proc.returncode == 1
        and len(fake.requests) == 2
        and "gave up after 2 attempts" in proc.stderr
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_that_breaks_off_is_retried(norma: RunNorma, tmp_path: Path, kind: str) -> None:
    with FakeProvider(kind, [Broken(), Reply(text="whole")]) as fake:
        proc = norma("--config", str(config(tmp_path, fake)), "run", "-p", "hi", env=ENV)
    assert proc.returncode == 0 and proc.stdout == "whole\n", proc.stderr
    assert len(fake.requests) == 2


def test_client_errors_are_not_retried_and_the_key_is_redacted(
    norma: RunNorma, tmp_path: Path, isolated_env: Path
) -> None:
    body = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    with FakeProvider("openai", [Status(401, body=body)]) as fake:
        proc = norma(
            "--config", str(config(tmp_path, fake)), "run", "-p", "hi", "--session", "k1", env=ENV
        )
    assert proc.returncode == 1 and len(fake.requests) == 1
    assert "HTTP 401" in proc.stderr and "Incorrect API key provided: [REDACTED]" in proc.stderr
    assert_key_nowhere(isolated_env, proc.stderr, proc.stdout)


def test_request_timeout(norma: RunNorma, tmp_path: Path) -> None:
    def slow(body: dict) -> Reply:
        time.sleep(1.5)
        return Reply(text="too late")

    with FakeProvider("openai", [slow, Reply(text="in time")]) as fake:
        cfg = config(tmp_path, fake, timeout=0.5, stream=False)
        proc = norma("--config", str(cfg), "run", "-p", "hi", env=ENV)
    assert proc.returncode == 0 and proc.stdout == "in time\n", proc.stderr
    with FakeProvider("openai", [slow]) as fake:
        cfg = config(tmp_path, fake, timeout=0.5, max_retries=0)
        proc = norma("--config", str(cfg), "run", "-p", "hi", env=ENV)
    assert proc.returncode == 1 and "no reply from" in proc.stderr and "within 0.5s" in proc.stderr


def test_retry_after_forms() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    later = retry_after_seconds(formatdate(time.time() + 30, usegmt=True))
    assert later is not None and 25 <= later <= 31
    assert retry_after_seconds(formatdate(time.time() - 60, usegmt=True)) == 0.0


def test_provider_selection_and_config_errors(norma: RunNorma, tmp_path: Path) -> None:
    with FakeProvider("openai", [Reply(text="from one"), Reply(text="other model")]) as one:
        cfg = tmp_path / "two.toml"
        cfg.write_text(
            one.toml("one")
            + '[providers.two]\nkind = "anthropic"\nmodel = "m2"\napi_key_env = "MISSING_KEY_ENV"\n'
        )
        proc = norma("--config", str(cfg), "run", "-p", "hi")
        assert proc.returncode == 2 and "several providers are configured (one, two)" in proc.stderr
        proc = norma("--config", str(cfg), "run", "-p", "hi", "--provider", "three")
        assert (
            proc.returncode == 2 and "unknown provider 'three' (providers: one, two)" in proc.stderr
        )
        proc = norma("--config", str(cfg), "run", "-p", "hi", "--provider", "two")
        assert (
            proc.returncode == 2 and "MISSING_KEY_ENV" in proc.stderr and "two.toml" in proc.stderr
        )
        assert (
            norma("--config", str(cfg), "run", "-p", "hi", "--provider", "one").stdout
            == "from one\n"
        )
        proc = norma(
            "--config", str(cfg), "run", "-p", "hi", "--provider", "one", "--model", "bigger"
        )
        assert proc.returncode == 0 and one.requests[-1].body["model"] == "bigger"
    assert len(one.requests) == 2  # config errors made no request
    proc = norma("run", "-p", "hi")
    assert proc.returncode == 2 and "no model provider configured" in proc.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[providers.x]\nkind = "carrier-pigeon"\nmodel = "m"\n')
    proc = norma("--config", str(bad), "run", "-p", "hi")
    assert (
        proc.returncode == 2
        and "unknown provider kind 'carrier-pigeon' (known: anthropic, openai)" in proc.stderr
    )
    proc = norma("run", "Read", "--model", "m", "-i", "{}")
    assert proc.returncode == 2 and "--model only apply to an agent session" in proc.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_stream_json_events(norma: RunNorma, tmp_path: Path, kind: str) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    script = [
        Reply(calls=[("c1", "Read", {"file_path": "a.txt"})], usage=(100, 20)),
        Reply(text="alpha it is", usage=(150, 5)),
    ]
    with FakeProvider(kind, script) as fake:
        proc = norma(
            "--config",
            str(config(tmp_path, fake)),
            "run",
            "-p",
            "go",
            "--output",
            "stream-json",
            env=ENV,
        )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["type"] for e in events] == [
        "start", "message", "message", "usage", "tool_use", "tool_result", "message", "message", "usage", "end",
    ]  # fmt: skip
    sid = events[0]["session_id"]
    assert all(e["session_id"] == sid for e in events)
    use, result = events[4], events[5]
    assert (use["id"], use["name"], use["input"]) == ("c1", "Read", {"file_path": "a.txt"})
    assert (
        result["tool_use_id"] == "c1"
        and result["norma"]["decision"] == "allow"
        and result["norma"]["trace_id"]
    )
    assert events[8]["run"] == {"input_tokens": 250, "output_tokens": 25, "total_tokens": 275}
    end = events[-1]
    assert (
        end["exit_code"] == 0
        and end["reason"] == "finished"
        and end["result"] == "alpha it is"
        and end["turns"] == 2
    )


def test_json_output_system_prompt_and_stdin(norma: RunNorma, tmp_path: Path) -> None:
    with FakeProvider("anthropic", [Reply(text="hello", usage=(3, 2))]) as fake:
        cfg = str(config(tmp_path, fake))
        args = (
            "--config",
            cfg,
            "run",
            "-p",
            "-",
            "--system",
            "Answer in one word.",
            "--output",
            "json",
        )
        proc = norma(*args, env=ENV, stdin="greet me")
    assert proc.returncode == 0, proc.stderr
    assert fake.requests[0].body["system"] == "Answer in one word."
    assert fake.user_texts(0) == ["greet me"]
    out = json.loads(proc.stdout)
    assert out["result"] == "hello" and out["exit_code"] == 0 and out["usage"]["total_tokens"] == 5
    assert (
        out["provider"] == "fake"
        and out["model"] == "fake-model"
        and Path(out["transcript"]).is_file()
    )
