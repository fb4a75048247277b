"""One-shot `norma run Read` (with its trace write) against a minimal hand-written Python script
doing the same file read plus one SQLite insert, side by side in one run.

SPEC §15 budget: norma within 4x of the baseline. Run: .venv/bin/python bench/bench_oneshot.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = int(os.environ.get("BENCH_RUNS", "25"))
BUDGET = 4.0

BASELINE = """
import sqlite3, sys
text = open(sys.argv[1], encoding="utf-8").read()
db = sqlite3.connect(sys.argv[2])
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, tool TEXT, n INTEGER)")
db.execute("INSERT INTO t (tool, n) VALUES (?, ?)", ("Read", len(text)))
db.commit()
sys.stdout.write(text)
"""


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="norma-bench-"))
    target = work / "file.txt"
    target.write_text("".join(f"line {i}\n" for i in range(200)))
    env = {**os.environ, "NORMA_HOME": str(work / "home"), "NORMA_LOAD_PLUGINS": ""}
    baseline = [sys.executable, "-c", BASELINE, str(target), str(work / "baseline.db")]
    # the installed console script, as a user runs it (python -m norma_cli adds runpy's cost)
    script = Path(sys.executable).with_name("norma")
    entry = [str(script)] if script.exists() else [sys.executable, "-m", "norma_cli"]
    norma = [*entry, "run", "Read", "-i", '{"file_path": "file.txt"}']
    for cmd in (baseline, norma):  # warm caches and create both databases
        timed(cmd, env, work)
    base_t, norma_t = [], []
    for _ in range(RUNS):
        base_t.append(timed(baseline, env, work))
        norma_t.append(timed(norma, env, work))
    b, n = statistics.median(base_t), statistics.median(norma_t)
    ratio = n / b
    print(f"one-shot Read + trace write, median of {RUNS} runs each")
    print(f"  baseline script : {b * 1000:7.1f} ms")
    print(f"  norma run Read  : {n * 1000:7.1f} ms")
    print(
        f"  ratio           : {ratio:5.2f}x   (budget {BUDGET:.0f}x: {'OK' if ratio <= BUDGET else 'OVER'})"
    )


if __name__ == "__main__":
    main()
