"""The hash-chained trace: tamper evidence (edit, delete, reorder, truncate), concurrent writers
in separate processes, a SIGKILLed writer, and the list/show/export/records commands."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RunNorma, results

from norma_cli.store.sqlite import Store, TraceRecord
from norma_cli.store.trace import CONTENT, GENESIS
from norma_cli.store.trace_query import TraceStore


def db() -> Path:
    return Path(os.environ["NORMA_HOME"]) / "norma.db"


def calls_file(tmp_path: Path, n: int, prefix: str = "c", name: str = "f.txt") -> Path:
    (tmp_path / name).write_text("hello\n")
    path = tmp_path / f"{prefix}.jsonl"
    path.write_text("".join(
        json.dumps({"type": "tool_use", "id": f"{prefix}_{i}", "name": "Read", "input": {"file_path": name}}) + "\n"
        for i in range(n)
    ))  # fmt: skip
    return path


@pytest.fixture
def five(norma: RunNorma, tmp_path: Path) -> RunNorma:
    """A store holding a chain of five entries (a batch of five reads)."""
    proc = norma("run", "--calls", str(calls_file(tmp_path, 5)))
    assert proc.returncode == 0, proc.stderr
    return norma


def verify(norma: RunNorma, *args: str) -> tuple[int, dict]:
    proc = norma("trace", "verify", "--json", *args)
    return proc.returncode, json.loads(proc.stdout)


# ----------------------------------------------------------------------------- tamper evidence
def test_intact_chain_verifies_and_prints_its_head(five: RunNorma) -> None:
    proc = five("trace", "verify")
    assert proc.returncode == 0 and "trace ok: 5 entries" in proc.stdout
    rows = (
        sqlite3.connect(db())
        .execute("SELECT seq, prev_hash, hash FROM traces ORDER BY seq")
        .fetchall()
    )
    assert rows[0][1] == GENESIS and all(rows[i][1] == rows[i - 1][2] for i in range(1, 5))
    assert f"head 5:{rows[-1][2]}" in proc.stdout


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE traces SET status = 'denied' WHERE seq = 3",
        "UPDATE traces SET events = replace(events, 'read_only', 'rule') WHERE seq = 3",
        "UPDATE traces SET duration_ms = duration_ms + 1 WHERE seq = 3",
        "UPDATE traces SET agent = 'mallory' WHERE seq = 3",
    ],
)
def test_edit_is_detected_and_named(five: RunNorma, edit: str) -> None:
    con = sqlite3.connect(db())
    trace_id = con.execute("SELECT id FROM traces WHERE seq = 3").fetchone()[0]
    con.execute(edit)
    con.commit()
    proc = five("trace", "verify")
    assert proc.returncode == 1
    assert f"entry 3 (trace {trace_id})" in proc.stderr and "edited" in proc.stderr
    code, out = verify(five)
    assert code == 1 and out["problem"]["seq"] == 3 and out["entries"] == 2


def test_rehashing_an_edited_entry_still_breaks_the_link(five: RunNorma) -> None:
    """An editor who recomputes the edited entry's own hash breaks the next entry's link."""
    con = sqlite3.connect(db())
    con.row_factory = sqlite3.Row
    row = dict(con.execute("SELECT * FROM traces WHERE seq = 3").fetchone())
    row["status"] = "denied"
    new_hash = hashlib.sha256(json.dumps([row["prev_hash"], 3, *(row[c] for c in CONTENT)], sort_keys=True,
                                         separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()  # fmt: skip
    con.execute("UPDATE traces SET status = 'denied', hash = ? WHERE seq = 3", (new_hash,))
    con.commit()
    code, out = verify(five)
    assert code == 1 and out["problem"]["seq"] == 4 and "does not link" in out["problem"]["message"]


def test_deletion_is_detected_and_named(five: RunNorma) -> None:
    con = sqlite3.connect(db())
    con.execute("DELETE FROM traces WHERE seq = 2")
    con.commit()
    proc = five("trace", "verify")
    assert (
        proc.returncode == 1
        and "entry 3" in proc.stderr
        and "entry 2 before it is missing" in proc.stderr
    )


def test_swapping_two_entries_is_detected(five: RunNorma) -> None:
    con = sqlite3.connect(db())
    con.execute("UPDATE traces SET seq = -1 WHERE seq = 2")
    con.execute("UPDATE traces SET seq = 2 WHERE seq = 3")
    con.execute("UPDATE traces SET seq = 3 WHERE seq = -1")
    con.commit()
    code, out = verify(five)
    assert code == 1 and out["problem"]["seq"] == 2


def test_truncation_is_caught_by_the_anchor(five: RunNorma) -> None:
    code, out = verify(five)
    anchor = f"{out['head']['seq']}:{out['head']['hash']}"
    assert verify(five, "--anchor", anchor)[0] == 0
    con = sqlite3.connect(db())
    con.execute("DELETE FROM traces WHERE seq = 5")
    con.commit()
    assert verify(five)[0] == 0  # a shorter chain is still a chain ...
    code, out = verify(five, "--anchor", anchor)
    assert code == 1 and "truncated" in out["problem"]["message"]  # ... but not the anchored one
    assert five("trace", "verify", "--anchor", "nonsense").returncode == 2


def test_export_verifies_on_its_own(five: RunNorma, tmp_path: Path) -> None:
    """The export carries everything needed to check the chain with nothing but sha256."""
    out = tmp_path / "trace.jsonl"
    assert five("trace", "export", "--format", "jsonl", "-o", str(out)).returncode == 0
    prev = GENESIS
    lines = out.read_text().splitlines()
    assert len(lines) == 5
    for line in lines:
        entry = json.loads(line)
        content = [
            json.dumps(entry["events"], separators=(",", ":")) if c == "events" else entry[c]
            for c in CONTENT
        ]
        content[CONTENT.index("is_error")] = int(entry["is_error"])
        digest = hashlib.sha256(json.dumps([prev, entry["seq"], *content], sort_keys=True, separators=(",", ":"),
                                           ensure_ascii=False).encode()).hexdigest()  # fmt: skip
        assert entry["prev_hash"] == prev and entry["hash"] == digest
        prev = entry["hash"]


# ----------------------------------------------------------------------------- concurrency
def test_eight_processes_500_calls_each_one_chain(norma: RunNorma, tmp_path: Path) -> None:
    files = [calls_file(tmp_path, 500, prefix=f"p{i}") for i in range(8)]
    env = dict(os.environ)
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "norma_cli", "run", "--calls", str(f)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in files]  # fmt: skip
    outputs = [p.communicate(timeout=180) for p in procs]
    elapsed = time.monotonic() - started
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert err == "" and len(results(out)) == 500
    con = sqlite3.connect(db())
    assert con.execute(
        "SELECT COUNT(*), COUNT(DISTINCT tool_use_id), MIN(seq), MAX(seq) FROM traces"
    ).fetchone() == (4000, 4000, 1, 4000)
    code, out = verify(norma)
    assert code == 0 and out["entries"] == 4000
    assert elapsed < 120  # a sanity bound, not a benchmark (bench/bench_trace.py measures)


def test_sigkill_mid_batch_leaves_a_verifiable_chain(norma: RunNorma, tmp_path: Path) -> None:
    batch = calls_file(tmp_path, 20_000)
    proc = subprocess.Popen([sys.executable, "-m", "norma_cli", "run", "--calls", str(batch)], cwd=tmp_path,
                            env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    count = 0
    while time.monotonic() < deadline and count < 300:
        time.sleep(0.05)
        try:
            count = (
                sqlite3.connect(db(), timeout=5)
                .execute("SELECT COUNT(*) FROM traces")
                .fetchone()[0]
            )
        except sqlite3.OperationalError:
            count = 0
    assert proc.poll() is None, "the batch ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    code, out = verify(norma)
    assert code == 0 and 300 <= out["entries"] < 20_000
    # the store goes on: the next writer extends the same chain
    assert norma("run", "--calls", str(calls_file(tmp_path, 3, prefix="after"))).returncode == 0
    code, after = verify(norma)
    assert code == 0 and after["entries"] == out["entries"] + 3


def test_threads_in_one_process_and_a_second_connection_share_the_chain(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    first, second = Store(tmp_path / "s.db"), Store(tmp_path / "s.db")

    def append(i: int) -> None:
        store = first if i % 2 else second
        store.append_trace(TraceRecord(id=f"{i:032x}", tool_use_id=f"t{i}", session_id="s", agent=None, tool="X",
                                       input_digest="0" * 64, decision="allow", stage="rule", rule=None,
                                       rule_source=None, status="completed", is_error=False, duration_ms=i / 7,
                                       events=[{"t": time.time(), "state": "completed", "n": i}]))  # fmt: skip

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(append, range(400)))
    result = TraceStore(first).verify()
    assert result.ok and result.entries == 400


def test_old_unchained_rows_are_kept_beside_the_chain(tmp_path: Path) -> None:
    """A store from before the chain (migration 1 only) keeps its rows in traces_unchained."""
    from norma_cli.store import sqlite as backend

    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
    )
    for stmt in dict(backend.MIGRATIONS)[1]:
        con.execute(stmt)
    con.execute("INSERT INTO schema_migrations VALUES (1, 0)")
    con.execute(
        "INSERT INTO traces VALUES ('a','t','s',NULL,'Read','d','allow','rule',NULL,NULL,'completed',0,1.0,NULL,NULL,'[]',0)"
    )
    con.commit()
    con.close()
    result = TraceStore(Store(path)).verify()
    assert result.ok and result.entries == 0 and result.unchained == 1


# ----------------------------------------------------------------------------- reading
def test_list_filters_show_timeline_and_records(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    cfg = tmp_path / "agents.toml"
    cfg.write_text('[agents.worker]\ntools = ["Read"]\n')
    read = norma(
        "--config", str(cfg), "--agent", "worker", "run", "Read", "-i", '{"file_path": "a.txt"}'
    )
    assert read.returncode == 0, read.stderr
    denied = norma(
        "--deny", "Write", "run", "Write", "-i", '{"file_path": "b.txt", "content": "b"}'
    )
    assert denied.returncode == 3
    trace_id = results(denied.stdout)[0]["norma"]["trace_id"]

    def listed(*args: str) -> list[dict]:
        proc = norma("trace", "list", "--json", *args)
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines()]

    assert [e["tool"] for e in listed()] == ["Read", "Write"]
    assert [e["tool"] for e in listed("--tool", "Write")] == ["Write"]
    assert [e["tool"] for e in listed("--state", "denied")] == ["Write"]
    assert [e["tool"] for e in listed("--agent", "worker")] == ["Read"]
    assert listed("--since", "1h") and listed("--since", "2999-01-01") == []
    session = listed("--tool", "Read")[0]["session_id"]
    assert [e["tool"] for e in listed("--session", session)] == ["Read"]
    assert "Write" in norma("trace", "list").stdout
    assert norma("trace", "list", "--since", "yesterday-ish").returncode == 2

    shown = norma("trace", "show", trace_id[:10])
    assert shown.returncode == 0
    assert (
        "outcome denied" in shown.stdout
        and "permission" in shown.stdout
        and "by rule" in shown.stdout
    )
    assert "rule=Write  source=--deny" in shown.stdout
    assert norma("trace", "show", "nothing-like-it").returncode == 1

    usage = [
        json.loads(line)
        for line in norma("trace", "records", "usage", "--json").stdout.splitlines()
    ]
    assert {(u["tool"], u["calls"], u["completed"], u["denied"]) for u in usage} == {
        ("Read", 1, 1, 0),
        ("Write", 1, 0, 1),
    }
    activity = [
        json.loads(line)
        for line in norma("trace", "records", "activity", "--json").stdout.splitlines()
    ]
    assert [a["event"] for a in activity] == ["start", "end", "start", "end"]
    assert activity[1]["reason"] == "exit" and activity[0]["agent"] == "worker"


def test_traffic_recorder_api(tmp_path: Path) -> None:
    """The recorder other tools (WebFetch) call: credentials never reach the store."""
    from norma_cli.store import records

    store = Store(tmp_path / "r.db")
    store.record_traffic(method="get", url="https://bob:hunter2@example.com/x?token=abc&page=2", status=200,
                         request_bytes=0, response_bytes=1234, response_sha256="f" * 64, duration_ms=12.5,
                         tool="WebFetch", session_id="s1", tool_use_id="t1")  # fmt: skip
    store.record_traffic(
        method="GET", url="https://unreachable.test/", status=None, error="connect refused"
    )
    first, second = records.read(store, "traffic")
    assert first["method"] == "GET" and first["status"] == 200 and first["response_bytes"] == 1234
    assert first["url"] == "https://[REDACTED]@example.com/x?token=%5BREDACTED%5D&page=2"
    assert "hunter2" not in json.dumps(first) and "abc" not in first["url"]
    assert second["status"] is None and second["error"] == "connect refused"
    assert records.read(store, "traffic", session="s1") == [first]
