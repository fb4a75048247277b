"""``norma approve``: decide the approval requests of waiting (or ``--no-wait``) runs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from norma_cli.store.approvals import Approval, Approvals


def _approvals(app: Any) -> Approvals:
    from norma_cli.errors import StoreError
    from norma_cli.store.approvals import Approvals

    store = app.runtime().store
    if store is None:
        raise StoreError("no store configured")
    return Approvals(store)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _describe(a: Approval, *, full: bool = False) -> str:
    import time

    shown = a.input if full else _clip(a.input, 200)
    left = a.expires_at - time.time()
    when = f"expires in {left:.0f}s" if a.status == "pending" and left > 0 else a.status
    if a.decider and a.status != "pending":
        when += f" by {a.decider}" + (f" ({a.decision_reason})" if a.decision_reason else "")
    if a.consumed_at:
        when += ", used"
    rule = f" [{a.rule} {a.rule_source}]" if a.rule else ""
    lines = [
        f"{a.id}  {a.tool}  {when}",
        f"    input  {shown}",
        f"    asked by {a.stage}{rule}: {a.reason}",
        f"    requester {a.requester}, session {a.session_id}"
        + (f", agent {a.agent}" if a.agent else ""),
    ]
    return "\n".join(lines)


@click.command("approve")
@click.argument("approval_id", metavar="[ID]", required=False)
@click.option("--deny", is_flag=True, help="Refuse the request instead of approving it.")
@click.option(
    "--reason", metavar="TEXT", help="Why (recorded with the decision and shown to the run)."
)
@click.option("--list", "list_", is_flag=True, help="List pending requests.")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="With --list: decided, expired and cancelled requests too.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_obj
def approve(app: Any, *, approval_id: str | None, deny: bool, reason: str | None, list_: bool,
            everything: bool, as_json: bool) -> None:  # fmt: skip
    """Approve or deny a pending call; list the queue; or, on a terminal with no ID, walk it.

    An approval covers exactly one call: the same tool with the same input (sha256 of its
    canonical JSON), run once. A waiting `norma run` continues within a fraction of a second;
    after `--no-wait`, the next identical run uses the answer.
    """
    from norma_cli.errors import UsageError
    from norma_cli.store.approvals import decider_name

    if approval_id is not None and not approval_id.strip():
        # Before the store opens: an empty ID (say `norma approve "$ID"` with ID unset) is a
        # prefix of every id and must approve nothing.
        raise UsageError("the approval ID is empty (see `norma approve --list`)")
    approvals = _approvals(app)
    if list_:
        if approval_id or deny or reason:
            raise UsageError("--list takes no ID, --deny or --reason")
        rows = approvals.queue(everything=everything)
        if as_json:
            import json

            click.echo(json.dumps([a.to_json() for a in rows], ensure_ascii=False, indent=1))
        elif not rows:
            click.echo("no pending approval requests", err=True)
        else:
            click.echo("\n".join(_describe(a) for a in rows))
        return
    if approval_id is None:
        if deny:
            raise UsageError("--deny needs an approval ID")
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("give an approval ID or --list (walking the queue needs a terminal)")
        _walk(approvals, decider_name(), reason)
        return
    decided = approvals.decide(approval_id, approve=not deny, decider=decider_name(), reason=reason)
    if as_json:
        import json

        click.echo(json.dumps(decided.to_json(), ensure_ascii=False))
    else:
        click.echo(f"{decided.status} {decided.id}: {decided.tool} {_clip(decided.input, 200)}")


def _walk(approvals: Approvals, decider: str, reason: str | None) -> None:
    """The interactive mode: each pending request in turn, y / n / s(kip) / q(uit)."""
    from norma_cli.store.approvals import ApprovalError

    pending = approvals.queue()
    if not pending:
        click.echo("no pending approval requests")
        return
    for a in pending:
        click.echo(_describe(a, full=True))
        answer = click.prompt("  approve? [y]es / [n]o / [s]kip / [q]uit", default="s", show_default=False,
                              type=click.Choice(["y", "n", "s", "q"]), show_choices=False)  # fmt: skip
        if answer == "q":
            return
        if answer == "s":
            continue
        try:
            decided = approvals.decide(a.id, approve=answer == "y", decider=decider, reason=reason)
        except ApprovalError as exc:  # decided elsewhere or expired meanwhile: say so, go on
            click.echo(f"  {exc}")
            continue
        click.echo(f"  {decided.status}")
