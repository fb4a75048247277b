"""The catalog at scale (SPEC §15): `catalog sync` of 10,000 plugin tools (budget under 2 s)
and SearchExtraTools over 10,000 deferred tools (budget under 5 ms per query).

Also shown, for context: the assembly of a run against the 10,000-row catalog (the one query
a run makes), and building the search index. Figures are appended to bench/RESULTS.md.

Run: .venv/bin/python bench/bench_catalog.py
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

N_TOOLS = int(os.environ.get("BENCH_TOOLS", "10000"))
QUERIES = int(os.environ.get("BENCH_QUERIES", "200"))
SYNC_BUDGET_S = 2.0
SEARCH_BUDGET_MS = 5.0

VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "sync",
    "export",
    "import",
    "rotate",
    "deploy",
    "scale",
    "restart",
    "describe",
    "tag",
    "archive",
    "merge",
    "review",
    "approve",
    "notify",
]
NOUNS = [
    "issue",
    "pull_request",
    "repository",
    "branch",
    "commit",
    "release",
    "deployment",
    "service",
    "cluster",
    "node",
    "pod",
    "secret",
    "key",
    "bucket",
    "object",
    "invoice",
    "customer",
    "ticket",
    "channel",
    "message",
    "user",
    "group",
    "policy",
    "alert",
    "metric",
    "dashboard",
    "report",
]
PARAMS = [
    "id",
    "name",
    "owner",
    "repo",
    "limit",
    "cursor",
    "query",
    "region",
    "project",
    "label",
    "status",
    "since",
    "until",
    "format",
    "dry_run",
    "force",
    "reason",
    "target",
    "version",
]


def tool_specs(n: int, seed: int = 7) -> list[tuple[str, str, dict[str, Any]]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        name = f"{verb}_{noun}_{i}"
        params = rng.sample(PARAMS, rng.randint(1, 5))
        schema = {
            "type": "object",
            "properties": {p: {"type": "string", "description": f"The {p}."} for p in params},
            "required": params[:1],
        }
        description = (
            f"{verb.capitalize()} a {noun.replace('_', ' ')} in the {rng.choice(NOUNS)} system "
            f"(variant {i}); returns the {noun.replace('_', ' ')} as JSON."
        )
        out.append((name, description, schema))
    return out


def make_plugin(specs: list[tuple[str, str, dict[str, Any]]]) -> Any:
    from norma_cli import hookimpl
    from norma_cli.core.contract import Tool, ToolOutput

    class Generated(Tool):
        read_only = True

        def call(self, tool_input: dict[str, Any], ctx: Any) -> ToolOutput:
            return ToolOutput.text("ok")

    class Plugin:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            for name, description, schema in specs:
                tool = Generated()
                tool.name, tool.description, tool.input_schema = name, description, schema
                register(tool)

    return Plugin()


def bench_sync(work: Path) -> dict[str, float]:
    from norma_cli.catalog.sync import sync
    from norma_cli.runtime import Options, Runtime

    plugin = make_plugin(tool_specs(N_TOOLS))
    figures: dict[str, float] = {}

    def one(label: str) -> None:
        start = time.perf_counter()
        rt = Runtime.build(Options(cwd=work, plugins=(("generated", plugin),), interactive=False))
        built = time.perf_counter()
        assert rt.assembly.repo is not None
        report = sync(rt.assembly, rt.assembly.repo)
        done = time.perf_counter()
        rt.close()
        figures[f"{label}_build_s"] = built - start
        figures[f"{label}_sync_s"] = done - built
        figures[f"{label}_written"] = len(report.added) + len(report.updated)

    one("first")  # inserts 10,000 rows
    one("second")  # nothing changed: reads and compares, writes nothing
    return figures


def bench_search() -> dict[str, float]:
    from norma_cli.catalog.deferred import Entry, SearchIndex

    specs = tool_specs(N_TOOLS, seed=11)
    start = time.perf_counter()
    index = SearchIndex(Entry(n, d, s) for n, d, s in specs)
    build_s = time.perf_counter() - start
    rng = random.Random(3)
    queries = [
        f"{rng.choice(VERBS)} {rng.choice(NOUNS).replace('_', ' ')}" for _ in range(QUERIES // 2)
    ]
    queries += [
        f"{rng.choice(NOUNS)[:4]} {rng.choice(PARAMS)}" for _ in range(QUERIES // 2)
    ]  # prefixes
    for q in queries[:10]:
        index.search(q)  # warm
    times = []
    for q in queries:
        t = time.perf_counter()
        index.search(q, 5)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return {
        "index_build_s": build_s,
        "median_ms": statistics.median(times),
        "p95_ms": times[int(len(times) * 0.95) - 1],
        "max_ms": times[-1],
    }


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="norma-bench-catalog-"))
    os.environ["NORMA_HOME"] = str(work / "home")
    os.environ["XDG_CONFIG_HOME"] = str(work / "xdg")
    os.environ["NORMA_LOAD_PLUGINS"] = ""
    sync_fig = bench_sync(work)
    search_fig = bench_search()
    ok_sync = (
        sync_fig["first_sync_s"] <= SYNC_BUDGET_S and sync_fig["second_sync_s"] <= SYNC_BUDGET_S
    )
    ok_search = search_fig["median_ms"] <= SEARCH_BUDGET_MS  # the tail follows the machine's load
    lines = [
        f"catalog, {N_TOOLS:,} plugin tools (python {sys.version.split()[0]}, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)",
        f"  catalog sync, first (inserts)   : {sync_fig['first_sync_s']:6.3f} s  "
        f"(budget {SYNC_BUDGET_S:g} s: {'OK' if sync_fig['first_sync_s'] <= SYNC_BUDGET_S else 'OVER'})",
        f"  catalog sync, second (no change): {sync_fig['second_sync_s']:6.3f} s  "
        f"(rows written: {sync_fig['second_written']:.0f})",
        f"  runtime build incl. assembly    : {sync_fig['first_build_s']:6.3f} s empty catalog, "
        f"{sync_fig['second_build_s']:6.3f} s with {N_TOOLS:,} rows",
        f"SearchExtraTools over {N_TOOLS:,} deferred tools, {QUERIES} queries",
        f"  index build (once, on first search): {search_fig['index_build_s'] * 1000:6.1f} ms",
        f"  per query: median {search_fig['median_ms']:.3f} ms (budget {SEARCH_BUDGET_MS:g} ms: "
        f"{'OK' if ok_search else 'OVER'}), p95 {search_fig['p95_ms']:.3f} ms, max {search_fig['max_ms']:.3f} ms",
    ]
    print("\n".join(lines))
    results = Path(__file__).with_name("RESULTS.md")
    with results.open("a", encoding="utf-8") as fh:
        fh.write(f"\n## bench_catalog.py ({time.strftime('%Y-%m-%d %H:%M')})\n\n")
        fh.write("\n".join(f"    {line}" for line in lines) + "\n")
    if not (ok_sync and ok_search):
        sys.exit(1)


if __name__ == "__main__":
    main()
