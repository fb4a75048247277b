"""`norma tools lint` of 10,000 schemas: SPEC §15 budget is under 3 s.

Generates 10,000 realistic tool definitions (8 parameters with enum, pattern, defaults,
examples, a nested array of $ref'd objects; no two schemas alike, so no cache can skip work;
one in ten has a defect to report) as an MCP
`{"tools": [...]}` listing in a temporary file, then times

  * the library: read_source + Linter.lint, in this process (median of --runs);
  * the CLI: `python -m norma_cli tools lint FILE` in a fresh process, if the CLI is wired;
  * a baseline in the same run: a fresh interpreter that only json-loads the file.

Run:  .venv/bin/python bench/bench_lint.py [--tools N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BUDGET_S = 3.0


def tool(i: int) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": f"File {i} operates on, relative to the workspace root.",
                "pattern": "^[^\\u0000]+$",
                "examples": ["src/main.py"],
            },
            "mode": {
                "type": "string",
                "description": "How to open the file.",
                "enum": ["read", "write", "append", f"mode{i % 7}"],
                "default": "read",
            },
            "encoding": {"type": "string", "description": "Text encoding.", "default": "utf-8"},
            "offset": {"type": "integer", "description": "First line (0-based).", "minimum": 0},
            "limit": {
                "type": "integer",
                "description": "How many lines at most.",
                "minimum": 1,
                "maximum": 100000,
                "default": 2000,
            },
            "follow_symlinks": {"type": "boolean", "description": "Follow symbolic links."},
            "tags": {
                "type": "array",
                "description": "Labels recorded with the call.",
                "items": {"type": "string"},
                "maxItems": 16,
            },
            "edits": {
                "type": "array",
                "description": "Replacements to apply in order.",
                "items": {"$ref": "#/$defs/edit"},
            },
        },
        "required": ["path", "mode"],
        "additionalProperties": False,
        "$defs": {
            "edit": {
                "type": "object",
                "description": "One replacement.",
                "properties": {
                    "old": {"type": "string", "description": "Text to find."},
                    "new": {"type": "string", "description": "Replacement text."},
                    "replace_all": {
                        "type": "boolean",
                        "description": "Replace every match.",
                        "default": False,
                    },
                },
                "required": ["old", "new"],
                "additionalProperties": False,
            }
        },
    }
    if i % 10 == 7:  # a defect worth reporting: a default that its own schema refuses
        schema["properties"]["limit"]["default"] = "all"
    return {"name": f"tool_{i:05d}", "description": f"File tool number {i}.", "inputSchema": schema}


def median_s(fn: Any, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    from norma_cli.lint import Linter, read_source

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tools.json"
        path.write_text(json.dumps({"tools": [tool(i) for i in range(args.tools)]}, indent=2))
        size_mb = path.stat().st_size / 1e6
        print(f"{args.tools} tool definitions, {size_mb:.1f} MB of JSON")

        def lib(profiles: tuple[str, ...] = ()) -> Any:
            return Linter(profiles).lint([read_source(path)])

        report = lib()
        print(f"  report: {report.summary()}")
        lib_s = median_s(lib, args.runs)
        lib_all_s = median_s(lambda: lib(("openai", "anthropic", "gemini")), args.runs)

        py = sys.executable
        base_code = f"import json; json.load(open({str(path)!r}))"
        base_s = median_s(lambda: subprocess.run([py, "-c", base_code], check=True), args.runs)

        cli = [py, "-m", "norma_cli", "tools", "lint", str(path), "--format", "json"]
        probe = subprocess.run(cli, capture_output=True, text=True)
        cli_s: float | None = None
        if probe.returncode in (0, 1) and probe.stdout.startswith("{"):
            cli_s = median_s(lambda: subprocess.run(cli, capture_output=True), args.runs)
        else:
            print(
                f"  CLI not timed: `norma tools lint` is not wired yet ({probe.stderr.strip()[:80]})"
            )

    print(f"\n{'measure':<44} {'median s':>9} {'vs budget':>10} {'vs baseline':>12}")
    rows = [
        ("baseline: fresh python, json.load the file", base_s),
        ("library: read + lint, no profile", lib_s),
        ("library: read + lint, all three profiles", lib_all_s),
    ]
    if cli_s is not None:
        rows.append(("CLI: norma tools lint FILE --format json", cli_s))
    for label, secs in rows:
        print(f"{label:<44} {secs:>9.3f} {secs / BUDGET_S:>9.2f}x {secs / base_s:>11.1f}x")
    # The budget is for the command as a user runs it; without the CLI, the library stands in.
    judged, secs = ("CLI", cli_s) if cli_s is not None else ("library", lib_s)
    verdict = "within" if secs < BUDGET_S else "OVER"
    print(f"\nbudget {BUDGET_S:.1f} s for 10,000 schemas: {verdict} ({judged} {secs:.3f} s)")
    print("(all three profiles is an extra, reporting ~7 diagnostics per tool; not budgeted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
