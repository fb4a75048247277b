"""Trace append throughput (hash-chained, committed) and the per-call overhead of the guard.

1. Appending one call's trace: ``Store.append_trace`` (BEGIN IMMEDIATE, read the head, sha256
   over compact canonical JSON, one INSERT, COMMIT; WAL with synchronous=NORMAL, i.e. durable
   across a crash of norma) against the baseline of the same row inserted *unchained* in an
   identical table and transaction. Also the chain's CPU part alone (canonical JSON + sha256).
2. The guard in the executor: the full pipeline for a Read call with no ``[intercept]``,
   with a guard for which Read is not a target, with Read a target decided by a name rule, by
   a path rule, and by the default after a non-matching path rule.
3. Concurrent writers: 8 `norma run --calls` processes x 500 calls against one store, against
   one process running the 4,000 calls; then the time `trace verify` takes over them.

Figures are medians of per-operation timings in one process; ratios are against the baseline
measured in the same run. Run: .venv/bin/python bench/bench_trace.py  (BENCH_N to change counts)
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

N = int(os.environ.get("BENCH_N", "3000"))


def record(i: int) -> Any:
    from norma_cli.store.sqlite import TraceRecord

    now = time.time()
    events = [
        {"t": now, "state": "validated", "by": "schema"},
        {
            "t": now,
            "state": "permission",
            "by": "read_only",
            "decision": "allow",
            "reason": "read-only tool inside the working roots",
        },
        {"t": now, "state": "executing", "by": "read_only"},
        {"t": now, "state": "completed", "by": "Read"},
    ]
    return TraceRecord(id=f"{i:032x}", tool_use_id=f"toolu_{i:020d}", session_id="0" * 32, agent=None, tool="Read",
                       input_digest="ab" * 32, decision="allow", stage="read_only", rule=None, rule_source=None,
                       status="completed", is_error=False, duration_ms=0.123, events=events,
                       reason="read-only tool inside the working roots")  # fmt: skip


def median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def bench_append(work: Path) -> None:
    import json

    from norma_cli.store import trace
    from norma_cli.store.sqlite import Store
    from norma_cli.store.trace_query import TraceStore

    store = Store(work / "chain.db")
    # baseline: what one call's trace cost before the chain — serialize the events and INSERT
    # the same columns into an identical table, same connection settings and transaction shape
    cols = list(trace.CONTENT)
    store.query(
        f"CREATE TABLE plain ({', '.join(c + ' PRIMARY KEY' if c == 'id' else c for c in cols)})"
    )
    store.query("CREATE INDEX plain_session ON plain (session_id)")  # the indexes the trace has
    store.query("CREATE INDEX plain_tool ON plain (tool)")
    insert = f"INSERT INTO plain ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    recs = [record(i) for i in range(N)]
    for i in range(200):  # warm-up of both paths
        store.append_trace(record(10**9 + i))
        with store.write() as conn:
            conn.execute(insert, trace.content_of(record(10**9 + i)))
    store.query("DELETE FROM traces")
    store.query("DELETE FROM plain")
    plain, chained, cpu = [], [], []
    for i, rec in enumerate(recs):
        t0 = time.perf_counter_ns()
        values = trace.content_of(rec)  # json.dumps of the events, as before
        with store.write() as conn:
            conn.execute(insert, values)
        t1 = time.perf_counter_ns()
        store.append_trace(rec)
        t2 = time.perf_counter_ns()
        trace.entry_hash(trace.GENESIS, i, values)
        t3 = time.perf_counter_ns()
        plain.append(t1 - t0)
        chained.append(t2 - t1)
        cpu.append(t3 - t2)
    assert TraceStore(store).verify().ok
    p, c, h = median_us(plain), median_us(chained), median_us(cpu)
    size = len(json.dumps(recs[0].events))
    print(
        f"trace append, one call per committed transaction (WAL, synchronous=NORMAL), median of {N}"
    )
    print(f"  (events ~{size} bytes of JSON)")
    print(f"  unchained INSERT (baseline): {p:7.1f} us  = {1e6 / p:8.0f} appends/s")
    print(
        f"  chained append_trace       : {c:7.1f} us  = {1e6 / c:8.0f} appends/s   ratio {c / p:4.2f}x"
    )
    print(
        f"    canonical JSON + sha256  : {h:7.1f} us of it (the rest: reading the head, a wider row)"
    )
    store.close()


CONFIGS = {
    "no [intercept] (baseline)": "",
    "guard on, Read not a target": '[intercept]\ntools = ["Write", "Bash"]\n',
    "Read a target, name rule": '[intercept]\ntools = ["Read"]\n[[intercept.rules]]\nrule = "Read"\ndecision = "allow"\n',
    "Read a target, path rule": '[intercept]\ntools = ["Read"]\n[[intercept.rules]]\nrule = "Read(./**)"\ndecision = "allow"\n',
    "Read a target, path miss": '[intercept]\ntools = ["Read"]\n[[intercept.rules]]\nrule = "Read(./secrets/**)"\ndecision = "deny"\n',
}


def bench_guard(work: Path) -> None:
    from norma_cli.core.contract import ToolCall
    from norma_cli.runtime import Options, Runtime

    (work / "f.txt").write_text("hello\n")
    call = ToolCall("t", "Read", {"file_path": "f.txt"})
    runtimes = {}
    for label, text in CONFIGS.items():
        cfg = work / f"{len(runtimes)}.toml"
        cfg.write_text(text)
        os.environ["NORMA_HOME"] = str(work / f"home{len(runtimes)}")
        runtimes[label] = Runtime.build(Options(cwd=work, config=cfg, interactive=False))
    samples: dict[str, list[int]] = {label: [] for label in runtimes}
    for rt in runtimes.values():
        for _ in range(200):
            rt.executor.run(call)
    for _ in range(N):  # interleaved, so machine noise hits every variant alike
        for label, rt in runtimes.items():
            t0 = time.perf_counter_ns()
            result = rt.executor.run(call)
            samples[label].append(time.perf_counter_ns() - t0)
            assert not result.is_error
    base = median_us(samples["no [intercept] (baseline)"])
    print(f"executor.run(Read), full pipeline with the trace on, median of {N}")
    for label, values in samples.items():
        m = median_us(values)
        extra = "" if m == base else f"   guard adds {m - base:+6.1f} us ({m / base:4.2f}x)"
        print(f"  {label:27}: {m:7.1f} us{extra}")
    for rt in runtimes.values():
        rt.close()


def bench_processes(work: Path, procs: int = 8, calls: int = 500) -> None:
    """Many writers at once: ``procs`` concurrent `norma run --calls` against one store, against
    one process running all the calls; then ``trace verify`` of the result."""
    import json
    import subprocess
    import sys

    from norma_cli.store.sqlite import Store
    from norma_cli.store.trace_query import TraceStore

    (work / "p.txt").write_text("hello\n")

    def batch(name: str, n: int) -> Path:
        path = work / f"{name}.jsonl"
        lines = (json.dumps({"type": "tool_use", "id": f"{name}_{i}", "name": "Read", "input": {"file_path": "p.txt"}})
                 for i in range(n))  # fmt: skip
        path.write_text("\n".join(lines) + "\n")
        return path

    def run(home: str, files: list[Path]) -> float:
        env = {**os.environ, "NORMA_HOME": str(work / home), "NORMA_LOAD_PLUGINS": ""}
        started = time.perf_counter()
        running = [subprocess.Popen([sys.executable, "-m", "norma_cli", "run", "--calls", str(f)], cwd=work, env=env,
                                    stdout=subprocess.DEVNULL) for f in files]  # fmt: skip
        assert all(p.wait() == 0 for p in running)
        return time.perf_counter() - started

    total = procs * calls
    one = run("one", [batch("all", total)])
    many = run("many", [batch(f"w{i}", calls) for i in range(procs)])
    store = Store(work / "many" / "norma.db")
    started = time.perf_counter()
    result = TraceStore(store).verify()
    verify_s = time.perf_counter() - started
    assert result.ok and result.entries == total
    print(
        f"{total} Read calls through `norma run --calls`, trace on (wall time, process start included)"
    )
    print(f"  1 process x {total:5}        : {one:6.2f} s = {total / one:6.0f} calls/s (baseline)")
    print(
        f"  {procs} processes x {calls:4} at once: {many:6.2f} s = {total / many:6.0f} calls/s   ratio {many / one:4.2f}x"
    )
    print(
        f"  trace verify of {total} entries: {verify_s * 1000:6.0f} ms = {total / verify_s:6.0f} entries/s"
    )


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="norma-bench-trace-"))
    os.environ["NORMA_HOME"] = str(work / "home")
    os.environ["NORMA_LOAD_PLUGINS"] = ""
    bench_append(work)
    bench_guard(work)
    bench_processes(work)


if __name__ == "__main__":
    main()
