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
    _require_utf8(tool_input)
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


def _require_utf8(tool_input: dict[str, Any]) -> None:
    """Refuse input no tool could be given: text with a lone surrogate (``"\\ud800"`` in
    JSON, or an argv byte that is not UTF-8) has no UTF-8 spelling.
    """
    import json

    from norma_cli.errors import UsageError

    try:
        json.dumps(tool_input, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ascii(exc.object[exc.start : exc.end])
        raise UsageError(f"input is not valid UTF-8 text: {exc.reason} ({bad})") from None


def _subcommands(rt: Any, tool: Any, command: str, ctx: Any) -> list[dict[str, Any]]:
    """Each simple command and redirection of a Bash line, judged on its own.

    Each piece goes through the whole engine as the line's parse read it (``read_as``): a
    command with the readings guessed for it, a redirection with the directories a ``cd``
    before it may have left — so a row never shows another rule than the decision applied.
    Nothing is parsed again (reparsing each nested level would cost the square of the depth).
    """
    from norma_cli.policy.shell import ShellScript, SubCommand, parse_script

    script = parse_script(command)
    # ``sudo rm x`` is two readings of one command (the second deny-only), as is a guessed
    # reading of ``$X -rf /``: a command's row weighs every deny-only reading of its text.
    guesses: dict[str, list[SubCommand]] = {}
    for sub in script.commands:
        if sub.deny_only:
            guesses.setdefault(sub.text, []).append(sub)
    out: list[dict[str, Any]] = []
    shown: set[str] = set()
    for sub in script.commands:
        if sub.deny_only:
            continue
        shown.add(sub.text)
        alone = ShellScript(sub.text, (sub, *guesses.get(sub.text, ())), (), ())
        out.append(_row(sub.text, _judge(rt, tool, alone, ctx), literal=sub.literal))
    for text, readings in guesses.items():
        # Readings of no command shown (a line that does not parse, one nested too deeply):
        # listed when they are what denies it.
        if text not in shown:
            verdict = _judge(rt, tool, ShellScript(text, tuple(readings), (), ()), ctx)
            if verdict.behavior == "deny":
                out.append(_row(text, verdict, literal=False))
    for red in script.redirects:
        if red.write and not red.harmless:
            alone = ShellScript(red.text, (), (red,), ())
            verdict = _judge(rt, tool, alone, ctx)
            row = _row(red.text, verdict, literal=alone.literal)
            if _past_allow_rules(verdict, ctx.mode) and rt.engine.rules.rules["allow"]:
                # A line of redirections alone names no command rule, so the engine never
                # allows one by rule; in a line whose commands are allowed the redirection is
                # judged by whether an Edit/Write rule (or acceptEdits) covers every place it
                # may write — with the same directories as here.
                group = rt.engine.rules.group("allow", tool.name)
                entry = group.redirect_allowed(red, ctx)
                if entry is not None:
                    row.update(decision="allow", stage="rule", rule=entry["rule"])
                    row["source"] = entry["source"]
            out.append(row)
    return out


def _judge(rt: Any, tool: Any, script: Any, ctx: Any) -> Any:
    """The engine's decision for a line read as ``script``."""
    from norma_cli.policy.shell import read_as

    with read_as(script):
        return rt.engine.evaluate(tool, {"command": script.source}, ctx)


def _past_allow_rules(verdict: Any, mode: str) -> bool:
    """Was ``verdict`` reached after the engine's allow-rule stage (SPEC §4 stages 4-5)?"""
    if verdict.behavior == "allow":
        return verdict.stage not in ("rule", "mode")
    if verdict.behavior == "deny":
        return verdict.stage == "mode" and mode in ("dontAsk", "auto")
    return verdict.stage == "default"


def _row(text: str, verdict: Any, *, literal: bool) -> dict[str, Any]:
    return {
        "command": text,
        "decision": verdict.behavior,
        "stage": verdict.stage,
        "rule": verdict.rule.text if verdict.rule else None,
        "source": verdict.rule.source if verdict.rule else None,
        "literal": literal,
    }
