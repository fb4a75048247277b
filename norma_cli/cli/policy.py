"""``norma policy check``: explain a permission decision without executing anything."""

from __future__ import annotations

from typing import Any

import click


@click.group("policy")
def policy() -> None:
    """Explain and test permission decisions."""


@policy.command("check")
@click.argument("name")
@click.option("-i", "--input", "input_", metavar="JSON|@FILE", help="Tool input as a JSON object, or @FILE.")
@click.option("--arg", "args", multiple=True, metavar="KEY=VALUE", help="One input field.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def check(app: Any, *, name: str, input_: str | None, args: tuple[str, ...], as_json: bool) -> None:
    """Show the decision for tool NAME with this input: the stage, the rule and where it came
    from, and for Bash each sub-command's verdict. Nothing runs and nothing is recorded.
    """
    from norma_cli.cli.run import parse_input

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
