"""In-process executor overhead per call (full pipeline, trace on) and `--calls` batch throughput.

SPEC §15 budgets: median per-call overhead under 150 us; a `--calls` batch of 10,000 read-only
calls at least 5,000 calls/s. The baseline printed beside each figure is the bare tool call
(the same function called directly) and a plain Python loop reading the same file.
Run: .venv/bin/python bench/bench_pipeline.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALLS = int(os.environ.get("BENCH_CALLS", "5000"))
BATCH = int(os.environ.get("BENCH_BATCH", "10000"))


def per_call_overhead(work: Path) -> None:
    os.environ["NORMA_HOME"] = str(work / "home")
    os.environ["NORMA_LOAD_PLUGINS"] = ""
    from norma_cli.core.contract import ToolCall
    from norma_cli.runtime import Options, Runtime

    (work / "f.txt").write_text("hello\n")
    rt = Runtime.build(Options(cwd=work, interactive=False))
    tool = rt.registry.get("Read")
    assert tool is not None
    ctx = rt.context()
    call = ToolCall("t", "Read", {"file_path": "f.txt"})
    for _ in range(200):
        rt.executor.run(call)
    direct, full = [], []
    for _ in range(CALLS):
        t0 = time.perf_counter_ns()
        tool.call({"file_path": "f.txt"}, ctx)
        t1 = time.perf_counter_ns()
        result = rt.executor.run(call)
        t2 = time.perf_counter_ns()
        direct.append(t1 - t0)
        full.append(t2 - t1)
    assert not result.is_error
    d, f = statistics.median(direct) / 1000, statistics.median(full) / 1000
    print(f"in-process pipeline, Read of a small file, trace on, median of {CALLS}")
    print(f"  tool.call alone        : {d:7.1f} us")
    print(f"  executor.run (full)    : {f:7.1f} us")
    print(
        f"  pipeline overhead      : {f - d:7.1f} us   (budget 150 us: {'OK' if f - d < 150 else 'OVER'})"
    )
    rt.close()


def batch_throughput(work: Path) -> None:
    (work / "b.txt").write_text("batch\n")
    lines = "".join(
        json.dumps(
            {
                "type": "tool_use",
                "id": f"toolu_{i}",
                "name": "Read",
                "input": {"file_path": "b.txt"},
            }
        )
        + "\n"
        for i in range(BATCH)
    )
    calls = work / "calls.jsonl"
    calls.write_text(lines)
    env = {**os.environ, "NORMA_HOME": str(work / "home2"), "NORMA_LOAD_PLUGINS": ""}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "norma_cli", "run", "--calls", str(calls)],
        env=env,
        cwd=work,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    norma_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(BATCH):
        (work / "b.txt").read_text()
    plain_s = time.perf_counter() - start
    rate = BATCH / norma_s
    print(f"`norma run --calls` with {BATCH} Read calls (one process, trace on)")
    print(
        f"  norma        : {norma_s:6.2f} s  = {rate:8.0f} calls/s   (budget 5000/s: {'OK' if rate >= 5000 else 'UNDER'})"
    )
    print(f"  plain reads  : {plain_s:6.2f} s  = {BATCH / plain_s:8.0f} reads/s (baseline)")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="norma-bench-"))
    per_call_overhead(work)
    batch_throughput(work)


if __name__ == "__main__":
    main()
