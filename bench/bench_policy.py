"""Permission evaluation of a 10-sub-command Bash line against 100 rules.

Budget: 200 us median per ``PermissionEngine.evaluate`` (this figure is printed, never
asserted). Three figures, each the median of many single evaluations:

* warm — the same line again: the parse comes from the per-text cache, as when the deny,
  ask and allow stages (and a re-check after a hook rewrite) look at one call;
* new line, simple — a line never seen before, made only of plain words and operators (the
  shell parser's fast path, no tree-sitter);
* new line, tree-sitter — a new line with a quoted word: full tree-sitter parse and walk;
* parse_script alone on such a line, for scale.

Run: .venv/bin/python bench/bench_policy.py
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from norma_cli.core.contract import CallContext, Tool
from norma_cli.core.permission import PermissionEngine
from norma_cli.policy.rules import Rule, RuleSet
from norma_cli.policy.shell import _parse, parse_script

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3000"))
BUDGET_US = 200.0
LINE = (
    "git status && git diff --stat | head -n 20 && npm test; ls -la src | grep foo "
    "&& echo done || cat README.md; make build && wc -l README.md"
)


class Bash(Tool):
    name = "Bash"


def hundred_rules() -> RuleSet:
    allow = [
        "Bash(git status)",
        "Bash(git diff:*)",
        "Bash(head:*)",
        "Bash(npm test)",
        "Bash(ls:*)",
        "Bash(grep:*)",
        "Bash(echo:*)",
        "Bash(cat:*)",
        "Bash(make build:*)",
        "Bash(wc:*)",
        "Edit(./build/**)",
        "Read(./docs/**)",
    ]
    allow += [f"Bash(tool{i} sub{i}:*)" for i in range(58)]
    deny = [
        "Bash(rm:*)",
        "Bash(curl:*)",
        "Bash(git push --force:*)",
        "Edit(//etc/**)",
        "Read(./secrets/**)",
    ]
    deny += [f"Bash(danger{i}:*)" for i in range(15)]
    ask = ["Bash(git push:*)", "Bash(npm publish:*)"] + [f"Bash(careful{i} x:*)" for i in range(8)]
    rules = RuleSet()
    for behavior, texts in (("allow", allow), ("deny", deny), ("ask", ask)):
        for text in texts:
            rules.add(Rule.parse(text, behavior, "bench"))  # type: ignore[arg-type]
    assert len(rules.all()) == 100
    return rules


def median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def main() -> None:
    root = Path.cwd()
    engine = PermissionEngine(hundred_rules())
    ctx = CallContext("bench", root, (root,))
    tool = Bash()
    decision = engine.evaluate(tool, {"command": LINE}, ctx)
    assert decision.behavior == "allow" and len(decision.subcommands) == 10, decision

    for _ in range(200):
        engine.evaluate(tool, {"command": LINE}, ctx)

    # Lines never seen before: a different file name each round. Plain words and quoted
    # strings take the plain-line reader; a redirection needs the full tree-sitter parse.
    def fresh(i: int, kind: str) -> str:
        name = {
            "plain": f"README{i}.md",
            "double": f'"README {i}.md"',
            "tree": f"README{i}.md 2>/dev/null",
        }
        return LINE.replace("README.md", name[kind])

    warm, cold, double, tree = [], [], [], []
    for i in range(ROUNDS):
        t0 = time.perf_counter_ns()
        engine.evaluate(tool, {"command": LINE}, ctx)
        t1 = time.perf_counter_ns()
        engine.evaluate(tool, {"command": fresh(i, "plain")}, ctx)
        t2 = time.perf_counter_ns()
        engine.evaluate(tool, {"command": fresh(i, "double")}, ctx)
        t3 = time.perf_counter_ns()
        engine.evaluate(tool, {"command": fresh(i, "tree")}, ctx)
        t4 = time.perf_counter_ns()
        warm.append(t1 - t0)
        cold.append(t2 - t1)
        double.append(t3 - t2)
        tree.append(t4 - t3)
    parse = []
    for i in range(ROUNDS):
        t0 = time.perf_counter_ns()
        parse_script(fresh(i + ROUNDS, "tree"))
        parse.append(time.perf_counter_ns() - t0)
    _parse.cache_clear()

    print(f"policy: 10-sub-command Bash line, 100 rules, median of {ROUNDS} evaluations")
    for label, samples in (
        ("warm (parse cached)", warm),
        ("new line, plain words", cold),
        ('new line, "quoted words"', double),
        ("new line, a redirection", tree),
    ):
        us = median_us(samples)
        print(
            f"  evaluate, {label:26}: {us:7.1f} us   ratio to the 200 us budget: {us / BUDGET_US:.2f}"
        )
    print(f"  parse_script alone, tree-sitter      : {median_us(parse):7.1f} us")


if __name__ == "__main__":
    main()
