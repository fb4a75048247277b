"""``norma trace``: list, show, verify and export the hash-chained trace; read the records."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from collections.abc import Iterator

    from norma_cli.store.sqlite import Store
    from norma_cli.store.trace_query import TraceEntry

STATES = ("completed", "failed", "denied", "pending", "error")
# event fields worth showing in a timeline, in this order (the rest is in --json)
DETAIL_KEYS = (
    "decision", "target", "rule", "source", "judge", "verdict", "failure", "on_failure",
    "pending_id", "decider", "reason", "error", "seconds", "path", "sha256", "hook",
)  # fmt: skip


def _store(app: Any) -> Store:
    from norma_cli.errors import StoreError

    rt = app.runtime()
    if rt.store is None:
        # [catalog] on_error = "fallback" let the runtime start without its store: say why
        raise StoreError(rt.assembly.fallback or "no store configured")
    return rt.store


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    import datetime

    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _echo_json(value: Any) -> None:
    import json

    click.echo(json.dumps(value, ensure_ascii=False, default=str))


@click.group("trace")
def trace() -> None:
    """The trace: one hash-chained entry per call, with every decision that led to its outcome."""


@trace.command("list")
@click.option("--session", metavar="ID", help="Only calls of this session.")
@click.option("--tool", metavar="NAME", help="Only calls of this tool.")
@click.option("--agent", metavar="KEY", help="Only calls made as this agent.")
@click.option("--state", type=click.Choice(STATES), help="Only calls that ended in this state.")
@click.option(
    "--since",
    metavar="WHEN",
    help="Only calls since WHEN: 10m, 2h, 7d, an ISO date/time, or epoch seconds.",
)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(0),
    help="The newest N calls (0 = all).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_(app: Any, *, session: str | None, tool: str | None, agent: str | None, state: str | None,
          since: str | None, limit: int, as_json: bool) -> None:  # fmt: skip
    """List calls, oldest first."""
    from norma_cli.store.trace_query import TraceFilter, TraceStore, parse_since

    f = TraceFilter(
        session, tool, agent, state, parse_since(since) if since else None, limit or None
    )
    entries = TraceStore(_store(app)).select(f)
    if as_json:
        for e in entries:
            _echo_json(e.to_json())
        return
    if not entries:
        click.echo("no trace entries", err=True)
        return
    click.echo(
        f"{'SEQ':>6}  {'TIME':19}  {'TOOL':16} {'STATUS':9} {'DECIDED BY':24} {'MS':>8}  TRACE"
    )
    for e in entries:
        by = e.stage + (f" {e.rule}" if e.rule else "")
        if e.pending_id:
            by = f"pending {e.pending_id}"
        click.echo(f"{e.seq:>6}  {_when(e.created_at)}  {e.tool[:16]:16} {e.status:9} {by[:24]:24} "
                   f"{e.duration_ms:8.1f}  {e.id}")  # fmt: skip


def _event_line(event: dict[str, Any], t0: float) -> str:
    offset = (event.get("t", t0) - t0) * 1000
    parts = [f"+{offset:8.1f} ms  {event.get('state', '?'):13} by {event.get('by') or '-':20}"]
    for key in DETAIL_KEYS:
        if key in event and event[key] not in (None, ""):
            value = event[key]
            text = str(value) if not isinstance(value, str) else value
            parts.append(f"{key}={text if len(text) < 160 else text[:160] + '…'}")
    return "  ".join(parts)


def _show(e: TraceEntry) -> None:
    click.echo(f"trace {e.id}   entry {e.seq}   hash {e.hash}")
    click.echo(
        f"  tool {e.tool}   tool_use {e.tool_use_id}   session {e.session_id}   agent {e.agent or '-'}"
    )
    click.echo(
        f"  at {_when(e.created_at)}   {e.duration_ms:.1f} ms   input sha256 {e.input_digest}"
    )
    rule = f"   rule {e.rule} ({e.rule_source})" if e.rule else ""
    click.echo(f"  outcome {e.status}   decision {e.decision or '-'}   stage {e.stage}{rule}")
    if e.reason:
        click.echo(f"  reason {e.reason}")
    if e.pending_id:
        click.echo(f"  approval {e.pending_id}")
    if e.spill_path:
        click.echo(f"  spill {e.spill_path} sha256 {e.spill_sha256}")
    click.echo("  timeline:")
    t0 = e.events[0].get("t", e.created_at) if e.events else e.created_at
    for event in e.events:
        click.echo("    " + _event_line(event, t0))


@trace.command("show")
@click.argument("key", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The entry as JSON.")
@click.pass_obj
def show(app: Any, *, key: str, as_json: bool) -> None:
    """One call's timeline. ID: a trace id (or a unique prefix), a tool_use id, or #SEQ."""
    from norma_cli.errors import NormaError
    from norma_cli.store.trace_query import TraceStore

    entries = TraceStore(_store(app)).find(key)
    if not entries:
        raise NormaError(f"no trace entry {key!r} (see `norma trace list`)")
    for i, e in enumerate(entries):
        if as_json:
            _echo_json(e.to_json())
        else:
            if i:
                click.echo()
            _show(e)


@trace.command("verify")
@click.option(
    "--anchor",
    metavar="SEQ:HASH",
    help="A head printed earlier: it must still be in the chain, unchanged.",
)
@click.option("--json", "as_json", is_flag=True, help="The result as JSON.")
@click.pass_obj
def verify(app: Any, *, anchor: str | None, as_json: bool) -> None:
    """Check the whole chain; exit 1 naming the first entry that was edited, deleted or moved.

    Prints the head (last entry and its hash): record it elsewhere and pass it back with
    --anchor to also catch entries deleted from the end.
    """
    from norma_cli.errors import UsageError
    from norma_cli.store.trace_query import TraceStore

    pinned: tuple[int, str] | None = None
    if anchor is not None:
        seq_text, _, digest = anchor.partition(":")
        digits_ok = seq_text.isascii() and seq_text.isdigit() and len(seq_text) <= 19
        if not digits_ok or len(digest) != 64:
            raise UsageError("--anchor: expected SEQ:HASH as printed by `norma trace verify`")
        pinned = (int(seq_text), digest.lower())
    result = TraceStore(_store(app)).verify(pinned)
    if as_json:
        problem = result.problem
        _echo_json({
            "ok": result.ok, "entries": result.entries,
            "head": {"seq": result.head_seq, "hash": result.head_hash},
            "problem": None if problem is None else {"seq": problem.seq, "trace_id": problem.trace_id, "message": problem.message},
            "unchained": result.unchained,
        })  # fmt: skip
    elif result.ok:
        click.echo(f"trace ok: {result.entries} entries chained")
        click.echo(f"head {result.head_seq}:{result.head_hash}")
        if result.unchained:
            click.echo(
                f"note: {result.unchained} older rows predate the chain (table traces_unchained)",
                err=True,
            )
    else:
        click.echo(f"trace BROKEN at {result.problem}", err=True)
        click.echo(
            f"{result.entries} entries verify before it; last good head {result.head_seq}:{result.head_hash}"
        )
    if not result.ok:
        sys.exit(1)


@trace.command("export")
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="Write to a file (default stdout).",
)
@click.pass_obj
def export(app: Any, *, fmt: str, output: str | None) -> None:
    """Every entry in chain order, one JSON object per line (with seq, prev_hash and hash, so
    the export can be verified on its own)."""
    import json

    from norma_cli.store.trace_query import TraceStore

    entries = TraceStore(_store(app)).iter_all()
    lines = (json.dumps(e.to_json(), ensure_ascii=False, default=str) + "\n" for e in entries)
    if output:
        _write_export(output, lines)
        return
    for line in lines:
        sys.stdout.write(line)


def _write_export(output: str, lines: Iterator[str]) -> None:
    """Write the export whole or not at all: to a temporary file beside the target, renamed
    over it once complete, so a failure (a full disk, a store error) leaves no half-written
    file. A target that is not a regular file (a device, a FIFO) is written in place."""
    import os
    import stat
    import tempfile

    from norma_cli.errors import NormaError

    def failed(exc: OSError) -> NormaError:
        return NormaError(f"cannot write the export to {output}: {exc.strerror or exc}")

    target = os.path.realpath(output)  # replace a symlink's target, not the link
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise failed(exc) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(target, "w", encoding="utf-8") as out:
                out.writelines(lines)
        except OSError as exc:
            raise failed(exc) from None
        return
    if st is not None:
        mode = stat.S_IMODE(st.st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=os.path.dirname(target)
        )
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise failed(exc) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


@trace.command("records")
@click.argument("kind", type=click.Choice(["activity", "usage", "llm", "traffic"]))
@click.option("--session", metavar="ID", help="Only rows of this session.")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(0),
    help="The newest N rows (0 = all).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def records(app: Any, *, kind: str, session: str | None, limit: int, as_json: bool) -> None:
    """The record surfaces: session activity, tool usage counts, judge (LLM) exchanges with
    secrets redacted, and outbound HTTP traffic."""
    from norma_cli.store import records as surfaces

    rows = surfaces.read(_store(app), kind, session=session, limit=limit or None)
    if as_json:
        for row in rows:
            _echo_json(row)
        return
    if not rows:
        click.echo(f"no {kind} records", err=True)
        return
    for row in rows:
        fields = []
        for key, value in row.items():
            if key in ("request", "response") and value:
                value = value if len(value) < 120 else value[:120] + "…"
            if key.endswith("_at") and isinstance(value, float):
                value = _when(value)
            fields.append(f"{key}={value}")
        click.echo("  ".join(fields))
