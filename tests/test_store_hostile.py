"""The store, the catalog rows, the trace commands and replay against damaged or hostile input:
one clear line and a non-zero exit, never a call without its record, never a half-written file.

Companion to test_hostile_inputs.py (which holds the QA sweep's own cases); these pin the
edges of the same fixes: what the store checks at open, how a bad catalog row is survived and
removed, and what `trace export`, `trace show`, `catalog sync` and `policy replay` do at the
margins.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RunNorma, results

from norma_cli.errors import StoreError
from norma_cli.store.sqlite import MIGRATIONS, Store, expected_objects


def db_path() -> Path:
    return Path(os.environ["NORMA_HOME"]) / "norma.db"


def one_line_error(proc: subprocess.CompletedProcess[str], code: int | None = None) -> str:
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert proc.returncode != 0, proc.stderr
    if code is not None:
        assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("norma: error:"), proc.stderr
    return lines[0]


def read_a_file(norma: RunNorma, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "a.txt").write_text("x")
    return norma(*extra, "run", "Read", "-i", '{"file_path": "a.txt"}')


# ----------------------------------------------------------------------------- the store at open
def test_a_fresh_store_holds_exactly_what_the_migrations_create(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    try:
        names = {
            r[0]
            for r in store.query("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        }
    finally:
        store.close()
    assert expected_objects() <= names
    # migration 2 renamed the first traces table: both names are expected, under their new names
    assert {"traces", "traces_unchained", "tool_usage", "schema_migrations"} <= expected_objects()


def test_a_newer_schema_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (1000, 0)")
    with pytest.raises(StoreError) as caught:
        Store(path)
    known = max(v for v, _ in MIGRATIONS)
    message = str(caught.value)
    assert str(path) in message and "newer norma" in message
    assert "schema 1000" in message and f"knows up to {known}" in message


@pytest.mark.parametrize("dropped", ["approvals", "tool_usage", "schema_migrations"])
def test_a_store_missing_a_table_or_view_is_refused(tmp_path: Path, dropped: str) -> None:
    path = tmp_path / "s.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        kind = "VIEW" if dropped == "tool_usage" else "TABLE"
        conn.execute(f"DROP {kind} {dropped}")
    if dropped == "schema_migrations":
        # no record of any migration: they are re-run, and the first one finds its table
        with pytest.raises(StoreError, match="migration failed"):
            Store(path)
        return
    with pytest.raises(StoreError) as caught:
        Store(path)
    assert "damaged" in str(caught.value) and dropped in str(caught.value)


def test_a_damaged_store_refuses_every_call_before_it_runs(norma: RunNorma, tmp_path: Path) -> None:
    assert read_a_file(norma, tmp_path).returncode == 0
    with sqlite3.connect(db_path()) as conn:
        conn.execute("DROP TABLE approvals")
    proc = norma(
        "--mode", "bypassPermissions",
        "run", "Bash", "-i", '{"command": "touch ran.txt"}',
    )  # fmt: skip
    line = one_line_error(proc)
    assert str(db_path()) in line and "damaged" in line and "approvals" in line
    assert proc.stdout == "" and not (tmp_path / "ran.txt").exists()


def test_a_store_that_cannot_be_opened_is_named_first(norma: RunNorma, tmp_path: Path) -> None:
    """`trace list` on a store in a read-only place: the store's own reason leads the line (the
    catalog is only a consequence)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    assert read_a_file(norma, tmp_path).returncode == 0
    home = db_path().parent
    home.chmod(0o555)  # no -shm can be created next to the database
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "norma_cli", "trace", "list"],
            cwd=tmp_path, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    finally:
        home.chmod(0o755)
    line = one_line_error(proc)
    assert line.startswith(f"norma: error: cannot open store {db_path()}"), line


# ----------------------------------------------------------------------------- catalog rows
def insert_row(name: str, **overrides: object) -> None:
    """A catalog row written by something other than this norma (an older one, a hand edit)."""
    with sqlite3.connect(db_path()) as conn:
        conn.row_factory = sqlite3.Row
        template = dict(conn.execute("SELECT * FROM tools WHERE name = 'c1'").fetchone())
        template.update(name=name, **overrides)
        cols = ", ".join(template)
        marks = ", ".join("?" for _ in template)
        conn.execute(f"INSERT INTO tools ({cols}) VALUES ({marks})", tuple(template.values()))


def test_a_bad_catalog_row_costs_its_own_tool_only(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma("catalog", "add", "c1", "--kind", "command", "--exec", "echo {{x}}")
    assert proc.returncode == 0, proc.stderr
    insert_row("x y")
    insert_row("c2", custom_timeout=float("inf"))
    proc = read_a_file(norma, tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = proc.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("norma: warning: catalog row") for w in warnings)
    assert "norma catalog remove 'x y'" in proc.stderr and "timeout" in proc.stderr
    # the good custom tool still runs; the bad one is refused, never run with an inf timeout
    proc = norma("--allow", "c1", "run", "c1", "-i", '{"x": "hello"}')
    assert proc.returncode == 0 and "hello" in results(proc.stdout)[0]["content"][0]["text"]
    proc = norma("--allow", "c2", "run", "c2", "-i", '{"x": "hello"}')
    assert proc.returncode != 0 and results(proc.stdout)[0]["is_error"]
    explain = norma("tools", "list", "--explain", "--json")
    states = {t["name"]: t for t in json.loads(explain.stdout)["tools"]}
    assert not states["c2"]["callable"] and "catalog row is invalid" in states["c2"]["reasons"][0]
    # and the CLI can undo it
    for name in ("x y", "c2"):
        proc = norma("catalog", "remove", name)
        assert proc.returncode == 0, proc.stderr
    proc = read_a_file(norma, tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""


def test_catalog_remove_leaves_code_defined_rows(norma: RunNorma) -> None:
    assert norma("catalog", "sync").returncode == 0
    line = one_line_error(norma("catalog", "remove", "Read"), 2)
    assert "--disable" in line
    one_line_error(norma("catalog", "remove", "nothing-here"), 2)


@pytest.mark.parametrize(
    "option",
    [
        ["--timeout", "nan"],
        ["--timeout", "-inf"],
        ["--timeout", "0"],
        ["--timeout", "1e300"],
        ["--max-output", "0"],
        ["--max-output", "99999999999999999999999"],
    ],
    ids=["nan", "-inf", "zero", "huge", "output-zero", "output-huge"],
)
def test_catalog_add_and_set_refuse_limits_a_call_cannot_use(
    norma: RunNorma, option: list[str]
) -> None:
    base = ["catalog", "add", "c1", "--kind", "command", "--exec", "echo {{x}}"]
    one_line_error(norma(*base, *option), 2)  # `--timeout 0` used to become 60 silently
    assert norma(*base).returncode == 0
    one_line_error(norma("catalog", "set", "c1", *option), 2)
    row = json.loads(norma("catalog", "show", "c1", "--json").stdout)
    assert row["custom_timeout"] == 60.0 and row["custom_max_output"] == 100_000


def test_catalog_add_refuses_a_name_with_a_trailing_newline(norma: RunNorma) -> None:
    one_line_error(norma("catalog", "add", "ok\n", "--kind", "shell", "--exec", "ok --help"), 2)


# ----------------------------------------------------------------------------- catalog sync
def test_catalog_sync_writes_what_it_can_then_fails(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[mcp.servers.dead]\ncommand = "/nonexistent/mcp"\ntimeout = 3\n')
    proc = norma("--config", str(cfg), "catalog", "sync", "--json", timeout=20)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert "Read" in report["added"]  # the code-defined tools were synced all the same
    assert proc.stderr.splitlines()[-1].startswith("norma: error: catalog sync: MCP server dead")
    listed = json.loads(norma("catalog", "list", "--json").stdout)
    assert "Read" in {r["name"] for r in listed}
    assert norma("catalog", "sync").returncode == 0  # without the dead server: a clean pass


# ----------------------------------------------------------------------------- trace show / verify
@pytest.mark.parametrize("key", ["#0000000000000000000000001", "1"])
def test_trace_show_reads_a_seq_with_leading_zeros(
    norma: RunNorma, tmp_path: Path, key: str
) -> None:
    assert read_a_file(norma, tmp_path).returncode == 0
    proc = norma("trace", "show", key, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["seq"] == 1


@pytest.mark.parametrize("key", ["#\u00b2", "#9223372036854775808", "#" + "9" * 5000])
def test_trace_show_of_a_seq_no_entry_can_have_is_not_found(norma: RunNorma, key: str) -> None:
    line = one_line_error(norma("trace", "show", key), 1)
    assert "no trace entry" in line


@pytest.mark.parametrize("seq", ["\u00b2", "9" * 5000])
def test_trace_verify_refuses_an_anchor_that_is_not_a_seq(norma: RunNorma, seq: str) -> None:
    one_line_error(norma("trace", "verify", "--anchor", f"{seq}:{'0' * 64}"), 2)


# ----------------------------------------------------------------------------- trace export
def trace_of(norma: RunNorma, tmp_path: Path, calls: int) -> None:
    (tmp_path / "a.txt").write_text("x")
    line = json.dumps({"type": "tool_use", "name": "Read", "input": {"file_path": "a.txt"}})
    batch = "".join(line.replace('"name"', f'"id": "r{i}", "name"') + "\n" for i in range(calls))
    (tmp_path / "b.jsonl").write_text(batch)
    assert norma("run", "--calls", "b.jsonl").returncode == 0


def test_trace_export_replaces_a_file_whole_keeping_its_mode_and_link(
    norma: RunNorma, tmp_path: Path
) -> None:
    trace_of(norma, tmp_path, 3)
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    target.chmod(0o640)
    (tmp_path / "link.jsonl").symlink_to(target)
    assert norma("trace", "export", "-o", "link.jsonl").returncode == 0
    assert (tmp_path / "link.jsonl").is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    entries = [json.loads(x) for x in target.read_text().splitlines()]
    assert [e["seq"] for e in entries] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_failed_trace_export_leaves_the_old_file_and_no_temporary(
    norma: RunNorma, tmp_path: Path
) -> None:
    trace_of(norma, tmp_path, 80)  # about 1 KB per entry: the export outgrows the limit below
    target = tmp_path / "out.jsonl"
    target.write_text("the previous export\n")

    def small_files() -> None:  # Python ignores SIGXFSZ: a write past the limit is EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (48_000, 48_000))

    proc = subprocess.run(
        [sys.executable, "-m", "norma_cli", "trace", "export", "-o", str(target)],
        cwd=tmp_path, capture_output=True, text=True, timeout=30, preexec_fn=small_files,
    )  # fmt: skip
    line = one_line_error(proc, 1)
    assert str(target) in line
    assert target.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.jsonl", "out.jsonl"]


# ----------------------------------------------------------------------------- policy replay
def test_replay_keeps_exact_repeats_out_and_refuses_a_reused_id(
    norma: RunNorma, tmp_path: Path
) -> None:
    ls = '{"type":"tool_use","id":"a","name":"Bash","input":{"command":"ls"}}\n'
    (tmp_path / "repeat.jsonl").write_text(ls + ls)  # stream-json says each call twice
    proc = norma("--allow", "Bash(ls:*)", "policy", "replay", "repeat.jsonl", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) == 1
    # the same id for a different input, name, or a value that only compares equal in Python
    for second in (
        '{"type":"tool_use","id":"a","name":"Bash","input":{"command":"rm -rf /"}}\n',
        '{"type":"tool_use","id":"a","name":"Read","input":{"command":"ls"}}\n',
    ):
        (tmp_path / "reused.jsonl").write_text(ls + second)
        line = one_line_error(norma("policy", "replay", "reused.jsonl"), 2)
        assert "'a'" in line and '{"command": "ls"}' in line
    one = '{"type":"tool_use","id":"b","name":"Read","input":{"limit":1}}\n'
    (tmp_path / "types.jsonl").write_text(one + one.replace("1", "true"))
    one_line_error(norma("policy", "replay", "types.jsonl"), 2)
