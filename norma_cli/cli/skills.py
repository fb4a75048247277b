"""``norma skills list``: the skills norma found, where each came from, and what it gates."""

from __future__ import annotations

from typing import Any

import click


@click.group("skills")
def skills() -> None:
    """Skills: SKILL.md folders from the project, the user config dir and plugins."""


@skills.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_skills(app: Any, *, as_json: bool) -> None:
    """List every skill, whether this agent sees it, and the tools it gates."""
    rt = app.runtime(with_store=False)
    asm = rt.assembly
    rows = [
        {
            "name": s.name,
            "description": s.description,
            "origin": s.origin,
            "path": s.path,
            "trusted": s.trusted,
            "visible": s.name in asm.visible_skills,
            "allowed_tools": list(s.allowed_tools),
            "mcps": list(s.mcps),
            "gates": asm.gated_by(s.name),
        }
        for s in sorted(asm.skills.values(), key=lambda s: s.name)
    ]
    if as_json:
        import json

        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(
            "no skills (add folders with a SKILL.md under .norma/skills/ or the user config dir)",
            err=True,
        )
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        flags = ("" if r["visible"] else " [hidden from this agent]") + (
            "" if r["trusted"] else " [untrusted]"
        )
        click.echo(f"{r['name']:<{width}}  {r['origin']:<8}  {r['description'][:70]}{flags}")
        if r["gates"]:
            click.echo(f"{'':<{width}}  unlocks: {', '.join(r['gates'])}")
