"""``norma policy check`` explains a permission decision, ``norma policy replay`` re-decides a
recorded transcript; neither executes anything."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click


@click.group("policy")
def policy() -> None:
    """Explain and test permission decisions."""


@policy.command("check")
@click.argument("name")
@click.option(
    "-i", "--input", "input_", metavar="JSON|@FILE", help="Tool input as a JSON object, or @FILE."
)
@click.option("--arg", "args", multiple=True, metavar="KEY=VALUE", help="One input field.")
@click.option("--agent", "agent_key", metavar="KEY", help="Agent key (same as the global --agent).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def check(
    app: Any,
    *,
    name: str,
    input_: str | None,
    args: tuple[str, ...],
    agent_key: str | None,
    as_json: bool,
) -> None:
    """Show the decision for tool NAME with this input: the stage, the rule and where it came
    from, and for Bash each sub-command's verdict. Nothing runs and nothing is recorded.
    """
    from norma_cli.oneshot import parse_input

    if agent_key is not None:
        app.options["agent"] = agent_key
    tool_input = parse_input(input_, args)
    report = explain(app.runtime(with_store=False), name, tool_input)
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    click.echo(f"{report['decision'].upper()}  (stage: {report['stage']})")
    if report["rule"]:
        click.echo(f"  rule:   {report['rule']}")
        click.echo(f"  source: {report['source']}")
    if report["reason"]:
        click.echo(f"  reason: {report['reason']}")
    for sub in report["subcommands"]:
        rule = f"  [{sub['rule']} @ {sub['source']}]" if sub.get("rule") else ""
        click.echo(f"  - {sub['decision']:<5} {sub['command']}{rule}")


@policy.command("replay")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--expect",
    "expect_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON: tool_use_id → expected decision, or an earlier replay's --json. Exit 1 on any difference.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def replay(app: Any, *, file: Path, expect_file: Path | None, as_json: bool) -> None:
    """Re-decide every tool call recorded in FILE under today's policy; nothing runs.

    FILE is a norma transcript (JSONL), an Anthropic messages list or an OpenAI messages list
    (detected). Each call gets today's decision (allow, deny, ask; error for an unknown tool or
    invalid input), stage, rule and its source. PreToolUse hooks are not run. With --expect the
    command exits 1 when any decision differs — a CI gate for policy changes.
    """
    import json

    from norma_cli.agent import replay as replaying

    fmt, calls = replaying.load_calls(file)
    expected = replaying.load_expected(expect_file) if expect_file is not None else None
    rows = replaying.replay(app.runtime(with_store=False), calls)
    diffs = replaying.differences(rows, expected) if expected is not None else []
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=2, ensure_ascii=False))
    else:
        click.echo(f"{len(rows)} call(s) in {file} ({fmt} format)", err=True)
        table = [("TOOL_USE_ID", "TOOL", "DECISION", "STAGE", "RULE", "SOURCE")]
        for r in rows:
            tool = f"{r.tool} (via {r.via})" if r.via else r.tool
            table.append((r.tool_use_id, tool, r.decision, r.stage, r.rule or "-", r.source or "-"))
        widths = [max(len(row[i]) for row in table) for i in range(5)]
        for row in table:
            click.echo(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
                + "  "
                + row[5]
            )
    if diffs:
        click.echo(f"norma: {len(diffs)} decision(s) differ from {expect_file}:", err=True)
        for d in diffs:
            actual = d["actual"] or "missing"
            why = (
                f" — {d['rule']} ({d['source']})"
                if d.get("rule")
                else (f" — {d['reason']}" if d.get("reason") else "")
            )
            click.echo(
                f"  {d['tool_use_id']} {d['tool'] or ''}: expected {d['expected']}, got {actual}{why}",
                err=True,
            )
        sys.exit(1)


def explain(rt: Any, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """The permission decision for one call, as ``policy check --json`` prints it."""
    from norma_cli.errors import UsageError

    tool = rt.registry.get(name)
    if tool is None:
        raise UsageError(f"unknown tool: {name}")
    ctx = rt.context()
    schema = rt.executor.schema_for(tool)
    if not tool.raw_input:
        issues = rt.executor.schemas.validate(schema, tool_input)
        if issues:
            raise UsageError(f"invalid input for {name}: " + "; ".join(map(str, issues)))
    decision = rt.engine.evaluate(tool, tool_input, ctx)
    report: dict[str, Any] = {
        "decision": decision.behavior,
        "stage": decision.stage,
        "rule": decision.rule.text if decision.rule else None,
        "source": decision.rule.source if decision.rule else None,
        "reason": decision.reason,
        "subcommands": [],
    }
    command = tool_input.get("command")
    if name == "Bash" and isinstance(command, str):
        report["subcommands"] = _subcommands(rt, tool, command, ctx)
    return report


def _subcommands(rt: Any, tool: Any, command: str, ctx: Any) -> list[dict[str, Any]]:
    """Each simple command and redirection of a Bash line, judged on its own."""
    from norma_cli.policy.shell import parse_script

    script = parse_script(command)
    out: list[dict[str, Any]] = []
    for sub in script.commands:
        if sub.deny_only:
            continue
        verdict = rt.engine.evaluate(tool, {"command": sub.text}, ctx)
        out.append(_row(sub.text, verdict, literal=sub.literal))
    for red in script.redirects:
        if red.write and not red.harmless:
            verdict = rt.engine.evaluate(tool, {"command": f": {red.text}"}, ctx)
            out.append(_row(red.text, verdict, literal=True))
    return out


def _row(text: str, verdict: Any, *, literal: bool) -> dict[str, Any]:
    return {
        "command": text,
        "decision": verdict.behavior,
        "stage": verdict.stage,
        "rule": verdict.rule.text if verdict.rule else None,
        "source": verdict.rule.source if verdict.rule else None,
        "literal": literal,
    }
