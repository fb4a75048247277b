"""Grep through norma against running `rg` directly, on a generated tree of 20,000 files.

Measured side by side, interleaved, median of BENCH_RUNS runs each:

* in-process: ``executor.run(Grep)`` through the full pipeline (trace write on) vs
  ``rg -l PATTERN DIR`` / ``rg -n PATTERN DIR`` run as a subprocess with output captured;
* one-shot: ``norma run Grep`` vs the same ``rg`` command (both are a process start).

SPEC §15 budget: Grep on a large tree within 1.3x of running rg directly (the in-process
figure; a one-shot adds Python's start-up, reported beside it). The Python engine's time is
printed for information. Run: .venv/bin/python bench/bench_grep.py
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DATA = ROOT / ".data" / "grep-tree"
FILES = 20_000
PER_DIR = 100
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
BUDGET = 1.3
TOKEN = "needle_token"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


def make_tree() -> Path:
    marker = DATA / f".complete-{FILES}"
    if marker.exists():
        return DATA
    shutil.rmtree(DATA, ignore_errors=True)
    rnd = random.Random(20_000)
    for i in range(FILES):
        d = DATA / f"d{i // PER_DIR:03}"
        if i % PER_DIR == 0:
            d.mkdir(parents=True)
        lines = [" ".join(rnd.choices(WORDS, k=8)) for _ in range(40)]
        if rnd.random() < 0.05:  # about 1,000 files hold the token
            lines[rnd.randrange(40)] += f" {TOKEN}"
        (d / f"f{i:05}.txt").write_text("\n".join(lines) + "\n")
    marker.write_text("")
    return DATA


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    from norma_cli.core.contract import ToolCall
    from norma_cli.runtime import Options, Runtime
    from norma_cli.tools.ripgrep import find_ripgrep

    tree = make_tree()
    rg = find_ripgrep()
    if rg is None:
        sys.exit("no rg found (is the ripgrep package installed?)")
    home = ROOT / ".data" / "grep-home"
    os.environ["NORMA_HOME"] = str(home)
    os.environ["NORMA_LOAD_PLUGINS"] = ""
    rt = Runtime.build(Options(cwd=tree, interactive=False))
    calls = iter(range(10**9))

    def norma_call(mode: str) -> None:
        result = rt.executor.run(
            ToolCall(f"toolu_{next(calls)}", "Grep", {"pattern": TOKEN, "output_mode": mode})
        )
        assert not result.is_error and "engine: ripgrep" in result.text(), result.text()[:200]

    def rg_direct(flag: str) -> None:
        subprocess.run([rg.path, flag, TOKEN, str(tree)], capture_output=True, check=True)

    env = {**os.environ}
    oneshot = [
        sys.executable,
        "-m",
        "norma_cli",
        "--cwd",
        str(tree),
        "run",
        "Grep",
        "-i",
        json.dumps({"pattern": TOKEN}),
    ]

    def norma_oneshot() -> None:
        subprocess.run(oneshot, env=env, capture_output=True, check=True)

    cases = {
        "files_with_matches": (lambda: norma_call("files_with_matches"), lambda: rg_direct("-l")),
        "content": (lambda: norma_call("content"), lambda: rg_direct("-n")),
        "one-shot norma run": (norma_oneshot, lambda: rg_direct("-l")),
    }
    for n_fn, r_fn in cases.values():  # warm the page cache and both code paths
        n_fn()
        r_fn()
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in cases}
    for _ in range(RUNS):
        for name, (n_fn, r_fn) in cases.items():
            times[name][0].append(timed(n_fn))
            times[name][1].append(timed(r_fn))

    os.environ["NORMA_DISABLE_RIPGREP"] = "1"
    py_runs = [
        timed(lambda: rt.executor.run(ToolCall("toolu_py", "Grep", {"pattern": TOKEN})))
        for _ in range(3)
    ]
    del os.environ["NORMA_DISABLE_RIPGREP"]
    rt.close()

    print(f"Grep vs rg on {FILES:,} files ({rg.source} rg at {rg.path}), median of {RUNS} runs")
    for name, (n_t, r_t) in times.items():
        n, r = statistics.median(n_t), statistics.median(r_t)
        ratio = n / r
        verdict = (
            f"budget {BUDGET}x: {'OK' if ratio <= BUDGET else 'OVER'}"
            if name != "one-shot norma run"
            else "start-up included"
        )
        print(
            f"  {name:20} norma {n * 1000:7.1f} ms   rg {r * 1000:7.1f} ms   ratio {ratio:5.2f}x   ({verdict})"
        )
    print(
        f"  python engine (files_with_matches, for information): {statistics.median(py_runs) * 1000:7.1f} ms"
    )


if __name__ == "__main__":
    main()
