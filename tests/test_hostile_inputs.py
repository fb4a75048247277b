"""Hostile input from a new user's side, through the real CLI.

The product rule: bad input of any kind is ONE clear line on stderr and the SPEC's exit code —
never a traceback or a `norma: internal error`, never a hang, never a call that ran without its
record, never a silently skipped check; security defaults fail closed. Each test names one case
that broke the rule in the QA sweep (or, near the end, a representative case that holds and is
not covered elsewhere). Cases that need what the `norma` fixture cannot express (a closed fd, a
memory limit, dropped capabilities) run the same CLI through `raw` with the same isolated env.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RunNorma, results

NORMA = [sys.executable, "-m", "norma_cli"]
SURROGATE_ARG = "\udcff"  # how Python spells the argv byte 0xff (not UTF-8)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int | None = None) -> None:
    """The rule: a non-zero exit (the one given, if any) and one `norma: error:` line."""
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert proc.returncode != 0, proc.stderr
    if code is not None:
        assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("norma: error:"), proc.stderr


def raw(
    argv: list[str],
    cwd: Path,
    *,
    timeout: float = 10,
    memory_limit: int | None = None,
    **popen: object,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` (a full command line) with the isolated env of the `norma` fixture."""

    def limit() -> None:
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(  # type: ignore[call-overload]
        argv, cwd=cwd, text=True, timeout=timeout, preexec_fn=limit, **popen
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def db_path() -> Path:
    return Path(os.environ["NORMA_HOME"]) / "norma.db"


# ============================================================================ FAILING (found)
# ---------------------------------------------------------------- input files that never end
@pytest.mark.parametrize(
    "args",
    [
        ["run", "Read", "-i", "@/dev/zero"],
        ["run", "--calls", "/dev/zero"],
        ["tools", "lint", "/dev/zero"],
        ["policy", "replay", "/dev/zero"],
        ["catalog", "set", "Read", "--schema", "@/dev/zero"],
    ],
    ids=["run-i", "calls", "lint", "replay", "catalog-schema"],
)
def test_a_device_given_as_an_input_file_is_refused_not_read_forever(
    tmp_path: Path, args: list[str]
) -> None:
    # Today each reads /dev/zero into memory until it dies (2 GB/s): capped at 1 GiB here, the
    # read ends in `internal error: MemoryError`; without the cap it is a hang and an OOM.
    proc = raw([*NORMA, *args], tmp_path, memory_limit=1 << 30)
    one_line_error(proc, 2)


# ---------------------------------------------------------------- JSON the json module refuses
def test_an_integer_too_long_to_convert_is_bad_json_not_an_internal_error(
    norma: RunNorma, tmp_path: Path
) -> None:
    big = "1" + "0" * 5000  # over Python's 4300-digit int conversion limit
    proc = norma("run", "Read", "-i", f'{{"file_path": "a.txt", "limit": {big}}}')
    one_line_error(proc, 2)
    write(
        tmp_path / "c.jsonl",
        f'{{"type":"tool_use","id":"a","name":"Read","input":{{"limit":{big}}}}}\n',
    )
    proc = norma("run", "--calls", "c.jsonl")
    one_line_error(proc, 2)


# ---------------------------------------------------------------- closed and failing std streams
def test_calls_from_a_closed_stdin_is_a_usage_error(tmp_path: Path) -> None:
    proc = raw(["bash", "-c", 'exec 0<&-; exec "$@"', "_", *NORMA, "run", "--calls", "-"], tmp_path)
    one_line_error(proc, 2)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "Read", "-i", '{"file_path": "a.txt"}'],
        ["tools", "list", "--json"],
        ["trace", "list"],
    ],
    ids=["run", "tools-list", "trace-list"],
)
def test_a_closed_stdout_is_an_error_not_lost_output(tmp_path: Path, args: list[str]) -> None:
    # run: `internal error: AttributeError` after the call ran; the listings: exit 0, output lost
    write(tmp_path / "a.txt", "x")
    assert raw([*NORMA, "run", "Read", "-i", '{"file_path": "a.txt"}'], tmp_path).returncode == 0
    proc = raw(["bash", "-c", 'exec 1>&-; exec "$@"', "_", *NORMA, *args], tmp_path)
    one_line_error(proc)


@pytest.mark.parametrize(
    "args",
    [["run", "Read", "-i", '{"file_path": "a.txt"}'], ["tools", "list"]],
    ids=["run", "tools-list"],
)
def test_stdout_on_a_full_device_is_one_clean_line(tmp_path: Path, args: list[str]) -> None:
    if not Path("/dev/full").is_char_device():
        pytest.skip("no /dev/full here")
    write(tmp_path / "a.txt", "x")
    with open("/dev/full", "w") as full:
        proc = raw([*NORMA, *args], tmp_path, stdout=full)
    one_line_error(proc)  # today: `norma: internal error: OSError: [Errno 28] ...`


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "click-path"])
def test_stdout_closed_early_still_closes_the_session(tmp_path: Path, fast_path: bool) -> None:
    # `norma run ... | head -c0`: the fast path returns on BrokenPipeError without closing the
    # session, so SessionEnd never fires ("whatever closed it", README); the click path does.
    marker = tmp_path / "ended"
    cfg = write(tmp_path / "n.toml", f'[[hooks.SessionEnd]]\ncommand = "touch {marker}"\n')
    write(tmp_path / "a.txt", "x")
    env = {**os.environ, **({} if fast_path else {"NORMA_NO_FAST_PATH": "1"})}
    r, w = os.pipe()
    os.close(r)  # every write to stdout fails with EPIPE, as after `| head -c0`
    try:
        proc = raw(
            [*NORMA, "--config", str(cfg), "run", "Read", "-i", '{"file_path": "a.txt"}'],
            tmp_path,
            stdout=w,
            env=env,
        )
    finally:
        os.close(w)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert marker.exists(), "SessionEnd did not fire"


# ---------------------------------------------------------------- config
def test_an_invalid_hook_matcher_regex_is_a_config_error(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", '[[hooks.PreToolUse]]\ncommand = "true"\nmatcher = "(("\n')
    proc = norma("config", "validate", str(cfg))
    one_line_error(proc, 2)  # today: `norma: internal error: error: missing ), ...` exit 1
    assert f"{cfg}:3" in proc.stderr and "matcher" in proc.stderr
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "c.toml"}')
    one_line_error(proc, 2)


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_numbers_in_config_are_rejected(
    norma: RunNorma, tmp_path: Path, value: str
) -> None:
    # TOML allows inf/nan; validate says ok and every call then fails with
    # `internal error while running Read: OverflowError`
    cfg = write(tmp_path / "c.toml", f'[[hooks.PreToolUse]]\ncommand = "true"\ntimeout = {value}\n')
    proc = norma("config", "validate", str(cfg))
    one_line_error(proc, 2)
    assert f"{cfg}:3" in proc.stderr and "timeout" in proc.stderr


def test_a_config_with_thousands_of_rules_loads_in_linear_time(
    norma: RunNorma, tmp_path: Path
) -> None:
    # every rule's `file:line` re-scans the whole text: 2,500 rules take 3 s, 5,000 take 11 s,
    # 30,000 (a 900 KB file) over a minute — on every `norma run`
    rules = ",\n".join(f'  "Bash(tool{i}:*)"' for i in range(6000))
    cfg = write(tmp_path / "c.toml", f"[permissions]\nallow = [\n{rules}\n]\n")
    proc = norma("config", "validate", str(cfg), timeout=10)
    assert proc.returncode == 0, proc.stderr


def test_an_unsearchable_working_directory_is_a_clean_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    try:
        proc = raw([*prefix, *NORMA, "--cwd", str(locked), "run", "Read", "-i", "{}"], tmp_path)
    finally:
        locked.chmod(0o755)
    one_line_error(proc, 2)  # today: `internal error: PermissionError: ... .norma/config.toml`


# ---------------------------------------------------------------- the store
def test_a_store_written_by_a_newer_norma_is_refused(norma: RunNorma, tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "x")
    assert norma("run", "Read", "-i", '{"file_path": "a.txt"}').returncode == 0
    with sqlite3.connect(db_path()) as conn:
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)")
    proc = norma("run", "Read", "-i", '{"file_path": "a.txt"}')
    one_line_error(proc)  # today: exit 0, writing into a schema it does not know
    assert str(db_path()) in proc.stderr
    assert proc.stdout == ""


def test_a_damaged_store_does_not_let_a_write_run_unrecorded(
    norma: RunNorma, tmp_path: Path
) -> None:
    write(tmp_path / "a.txt", "x")
    assert norma("run", "Read", "-i", '{"file_path": "a.txt"}').returncode == 0
    with sqlite3.connect(db_path()) as conn:
        conn.execute("DROP TABLE traces")
    proc = norma(
        "--mode", "acceptEdits", "run", "Write", "-i", '{"file_path": "new.txt", "content": "x"}'
    )
    one_line_error(proc)
    # today the file is written, then `cannot write trace: no such table: traces`
    assert not (tmp_path / "new.txt").exists(), "the Write ran without a trace record"


# ---------------------------------------------------------------- catalog
@pytest.mark.parametrize("name", ["x y", "n" * 200, "t\u00e9st"], ids=["space", "long", "unicode"])
def test_catalog_add_refuses_a_bad_name_and_never_bricks_the_home(
    norma: RunNorma, tmp_path: Path, name: str
) -> None:
    write(tmp_path / "a.txt", "x")
    proc = norma("catalog", "add", name, "--kind", "command", "--exec", "echo hi")
    one_line_error(proc, 2)
    # today the row is stored, and every later command fails "invalid tool name ..." —
    # `catalog set` included, so the CLI cannot undo it
    proc = norma("run", "Read", "-i", '{"file_path": "a.txt"}')
    assert proc.returncode == 0, proc.stderr


def test_catalog_add_refuses_a_non_finite_timeout(norma: RunNorma) -> None:
    proc = norma(
        "catalog", "add", "c1", "--kind", "command", "--exec", "echo {{x}}", "--timeout", "inf"
    )
    one_line_error(proc, 2)  # today: added; each call then fails with OverflowError


def test_catalog_sync_fails_when_a_server_cannot_be_listed(norma: RunNorma, tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.toml", '[mcp.servers.dead]\ncommand = "/nonexistent/mcp"\ntimeout = 3\n'
    )
    proc = norma("--config", str(cfg), "catalog", "sync", timeout=20)
    # today: exit 0 with a warning — a CI job syncing to catch rug pulls passes unchecked
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "dead" in proc.stderr


# ---------------------------------------------------------------- text that is not UTF-8
def test_a_lone_surrogate_in_input_is_invalid_input_not_an_internal_error(
    norma: RunNorma,
) -> None:
    proc = norma("run", "Read", "-i", '{"file_path": "a\\ud800"}')
    res = results(proc.stdout)[0]
    assert proc.returncode == 1 and res["is_error"]
    text = res["content"][0]["text"]
    # today: "internal error while running Read: UnicodeEncodeError ...", stage "lookup"
    assert "internal error" not in text and res["norma"]["stage"] == "schema", res["norma"]
    proc = norma("--allow", "Bash(echo:*)", "run", "Bash", "-i", '{"command": "echo \\ud800"}')
    res = results(proc.stdout)[0]
    assert res["is_error"] and "internal error" not in res["content"][0]["text"]


@pytest.mark.parametrize(
    "args",
    [
        ["catalog", "set", "Read", "--description", SURROGATE_ARG],
        ["approve", SURROGATE_ARG],
        ["policy", "check", "Bash", "-i", '{"command": "echo \\ud800"}'],
    ],
    ids=["catalog-description", "approve-id", "policy-check"],
)
def test_text_that_is_not_utf8_is_a_one_line_error(norma: RunNorma, args: list[str]) -> None:
    proc = norma(*args)
    one_line_error(proc)


def test_an_ascii_stdout_encoding_still_prints_results(norma: RunNorma, tmp_path: Path) -> None:
    write(tmp_path / "u.txt", "h\u00e9llo \u2713\n")
    proc = norma("run", "Read", "-i", '{"file_path": "u.txt"}', env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0, proc.stderr  # today: internal error: UnicodeEncodeError
    assert "llo" in proc.stdout


# ---------------------------------------------------------------- files that are not files
def test_write_refuses_to_replace_a_fifo(norma: RunNorma, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = norma(
        "--mode", "acceptEdits", "run", "Write", "-i", '{"file_path": "fifo", "content": "x"}'
    )
    # Read and Edit say "not a regular file"; Write renames a regular file over it (as root,
    # with an allow rule, it replaced /dev/full the same way)
    assert proc.returncode == 1, proc.stdout
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_read_of_a_procfs_file_returns_its_content(norma: RunNorma) -> None:
    proc = norma(
        "--allow", "Read(//proc/**)", "run", "Read", "-i", '{"file_path": "/proc/self/status"}'
    )
    res = results(proc.stdout)[0]
    # today: "/proc/<pid>/status is empty (0 bytes)." — procfs sizes are 0, the content is not
    assert proc.returncode == 0 and "Name:" in res["content"][0]["text"], res["content"]


# ---------------------------------------------------------------- inputs that cost too much
def test_the_python_grep_engine_survives_a_catastrophic_regex(
    norma: RunNorma, tmp_path: Path
) -> None:
    # today: no answer at all — `re` cannot be interrupted, and the 60 s search deadline is
    # only checked between lines, so one line with 40 "a"s runs for hours
    write(tmp_path / "f.txt", "a" * 40 + "!\n")
    proc = norma(
        "run",
        "Grep",
        "-i",
        '{"pattern": "(a+)+$", "output_mode": "content"}',
        env={"NORMA_DISABLE_RIPGREP": "1"},
        timeout=15,
    )
    assert proc.returncode in (0, 1) and results(proc.stdout)


def test_deeply_nested_substitutions_are_decided_quickly(norma: RunNorma, tmp_path: Path) -> None:
    # quadratic in depth once any Bash rule exists: depth 1000 takes 10 s, 2000 over a minute
    depth = 1500
    command = "echo " + "$(" * depth + "rm -rf x" + ")" * depth
    write(tmp_path / "in.json", json.dumps({"command": command}))
    proc = norma(
        "--allow", "Bash(echo:*)", "--deny", "Bash(rm:*)",
        "policy", "check", "Bash", "-i", "@in.json", "--json",
        timeout=10,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["decision"] != "allow"


# ---------------------------------------------------------------- trace, replay, trust
def test_trace_show_of_a_huge_seq_is_not_found(norma: RunNorma) -> None:
    proc = norma("trace", "show", "#99999999999999999999999")
    one_line_error(proc, 1)  # today: internal error: OverflowError (SQLite INTEGER)
    assert "no trace entry" in proc.stderr


@pytest.mark.parametrize("target", ["/nonexistent-dir/x.jsonl", "/dev/full"])
def test_trace_export_to_an_unwritable_place_is_one_line(
    norma: RunNorma, tmp_path: Path, target: str
) -> None:
    write(tmp_path / "a.txt", "x")
    norma("run", "Read", "-i", '{"file_path": "a.txt"}')
    proc = norma("trace", "export", "--format", "jsonl", "-o", target)
    one_line_error(proc)  # today: internal error: FileNotFoundError / OSError


def test_policy_replay_never_drops_a_call_with_a_reused_id(norma: RunNorma, tmp_path: Path) -> None:
    write(
        tmp_path / "t.jsonl",
        '{"type":"tool_use","id":"a","name":"Bash","input":{"command":"ls"}}\n'
        '{"type":"tool_use","id":"a","name":"Bash","input":{"command":"rm -rf /"}}\n',
    )
    write(tmp_path / "expect.json", '{"a": "allow"}')
    proc = norma(
        "--allow", "Bash(ls:*)", "--deny", "Bash(rm:*)",
        "policy", "replay", "t.jsonl", "--expect", "expect.json",
    )  # fmt: skip
    # today: the second call (denied by a rule) is deduplicated away and the gate exits 0
    assert proc.returncode != 0, proc.stdout


def test_config_trust_refuses_a_file_that_does_not_validate(
    norma: RunNorma, tmp_path: Path
) -> None:
    write(tmp_path / ".norma" / "config.toml", "[permissions]\nmodez = 1\n")
    proc = norma("config", "trust")
    one_line_error(proc, 2)  # today: "trusted ... (sha256 ...)", exit 0
    write(tmp_path / "blob.bin", "\x00\x01 not a config")
    proc = norma("config", "trust", "blob.bin")
    one_line_error(proc, 2)


# ---------------------------------------------------------------- mcp serve
def test_mcp_serve_http_on_a_busy_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = raw([*NORMA, "mcp", "serve", "--transport", "http", "--port", str(port)], tmp_path)
    # today: "norma: serving 12 tools" then "norma: internal error: OSError: [Errno 98] ..."
    assert proc.returncode != 0
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("norma: error:") and str(port) in proc.stderr


def test_mcp_serve_stdio_answers_every_request(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "x")
    proc = subprocess.Popen(
        [*NORMA, "mcp", "serve"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    init = {
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": {"name": "qa", "version": "0"},
    }
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        # a lone surrogate escape: valid JSON text, not valid Unicode
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"\\ud800"}}}',
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "Read", "arguments": {"file_path": "a.txt"}}}),
    ]  # fmt: skip
    proc.stdin.write("\n".join(lines) + "\n")
    proc.stdin.flush()
    answered: set[int] = set()
    deadline = time.monotonic() + 10
    try:
        while 3 not in answered and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            answered.add(json.loads(line).get("id"))
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert 3 in answered
    assert 2 in answered, "request 2 got no reply: the client waits forever"


# ---------------------------------------------------------------- usage errors
@pytest.mark.parametrize(
    "args",
    [
        ["--mode", "god", "run", "Read", "-i", "{}"],
        ["run", "--calls", "x.jsonl", "--max-concurrency", "0"],
        ["trace", "list", "--limit", "-1"],
        ["config", "trust", "/nonexistent.toml"],
        ["mcp", "serve", "--transport", "http", "--port", "99999"],
    ],
    ids=["mode", "max-concurrency", "limit", "trust-missing", "port"],
)
def test_usage_errors_are_one_line(norma: RunNorma, args: list[str]) -> None:
    proc = norma(*args)
    # today click prints three lines: "Usage: ...", "Try 'norma ... --help' ...", "Error: ..."
    one_line_error(proc, 2)


# ============================================================================ PASSING (hold)
@pytest.mark.parametrize("kind", ["fifo", "symlink-loop", "socket", "directory"])
def test_special_files_are_refused_by_read_without_hanging(
    norma: RunNorma, tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink-loop":
        (tmp_path / "other").symlink_to(target)
        target.symlink_to(tmp_path / "other")
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    else:
        target.mkdir()
    proc = norma("run", "Read", "-i", '{"file_path": "target"}', timeout=10)
    res = results(proc.stdout)[0]
    assert proc.returncode == 1 and res["is_error"]
    assert "internal error" not in res["content"][0]["text"]


def test_norma_home_that_is_a_regular_file_is_one_line(norma: RunNorma, tmp_path: Path) -> None:
    home = write(tmp_path / "home-file", "not a directory")
    proc = norma("run", "Read", "-i", "{}", env={"NORMA_HOME": str(home)})
    one_line_error(proc, 2)
    assert str(home) in proc.stderr


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ('[permissions]\nallow = "Read"\n', 2, "permissions.allow: expected an array"),
        ("[permissions]\nallow = [1]\n", 2, "permissions.allow[0]: expected a string"),
        ("permissions = 3\n", 1, "permissions: expected a table"),
        ('[permissions]\nmode = "plan"\nmode = "default"\n', 3, "invalid TOML"),
        ('[output]\nmax_chars = "lots"\n', 2, "output.max_chars: expected an integer"),
        ("[web]\ntimeout = -3\n", 2, "web.timeout: must be at least"),
    ],
    ids=[
        "list-as-string",
        "list-item-type",
        "table-as-scalar",
        "duplicate-key",
        "int-as-string",
        "negative",
    ],
)
def test_config_type_errors_name_file_line_and_key(
    norma: RunNorma, tmp_path: Path, text: str, line: int, needle: str
) -> None:
    cfg = write(tmp_path / "c.toml", text)
    proc = norma("--config", str(cfg), "run", "Read", "-i", "{}")
    one_line_error(proc, 2)
    assert f"{cfg}:{line}:" in proc.stderr and needle in proc.stderr


def test_binary_and_empty_config_files(norma: RunNorma, tmp_path: Path) -> None:
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\x00\x01\xff\xfe\x89PNG")
    one_line_error(norma("config", "validate", str(binary)), 2)
    empty = write(tmp_path / "e.toml", "")
    assert norma("config", "validate", str(empty)).returncode == 0


def test_calls_file_edge_cases(norma: RunNorma, tmp_path: Path) -> None:
    write(tmp_path / "int-id.jsonl", '{"type":"tool_use","id":5,"name":"Read","input":{}}\n')
    proc = norma("run", "--calls", "int-id.jsonl")
    one_line_error(proc, 2)
    assert "int-id.jsonl:1" in proc.stderr
    (tmp_path / "dir.jsonl").mkdir()
    one_line_error(norma("run", "--calls", "dir.jsonl"), 2)
    write(tmp_path / "empty.jsonl", "\n\n")
    proc = norma("run", "--calls", "empty.jsonl")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""


def test_trace_show_of_an_unknown_id_is_one_line(norma: RunNorma) -> None:
    proc = norma("trace", "show", "deadbeefdeadbeef")
    one_line_error(proc, 1)
    assert "no trace entry" in proc.stderr


def test_sigterm_mid_batch_leaves_a_record_for_every_printed_result(tmp_path: Path) -> None:
    calls = "".join(
        json.dumps({"type": "tool_use", "id": f"c{i}", "name": "Bash",
                    "input": {"command": f"sleep 0.05; echo {i}"}}) + "\n"
        for i in range(200)
    )  # fmt: skip
    write(tmp_path / "b.jsonl", calls)
    proc = subprocess.Popen(
        [*NORMA, "--allow", "Bash", "run", "--calls", "b.jsonl"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 143 and err.strip() == "norma: terminated by SIGTERM"
    printed = {r["tool_use_id"] for r in results(out)}
    assert 0 < len(printed) < 200
    with sqlite3.connect(db_path()) as conn:
        rows = conn.execute("SELECT tool_use_id, status FROM traces").fetchall()
    completed = {tid for tid, status in rows if status == "completed"}
    assert printed <= completed  # no result without its record
    assert len(rows) - len(completed) <= 1  # at most the one call the signal stopped
    verify = subprocess.run(
        [*NORMA, "trace", "verify"], cwd=tmp_path, capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stderr


def test_lint_of_a_50mb_file_finishes(norma: RunNorma, tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {f"p{j}": {"type": "string", "description": "y" * 2000} for j in range(20)},
    }
    tools = [
        {"name": f"t{i}", "description": "x" * 1000, "input_schema": schema} for i in range(1200)
    ]
    big = write(tmp_path / "big.json", json.dumps({"tools": tools}))
    assert big.stat().st_size > 48_000_000
    proc = norma("tools", "lint", str(big), timeout=60)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr
    assert "1200 tools" in proc.stderr


def test_an_http_mcp_server_on_a_closed_port_fails_only_its_tools(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write(
        tmp_path / "c.toml", '[mcp.servers.closed]\nurl = "http://127.0.0.1:1/mcp"\ntimeout = 2\n'
    )
    started = time.monotonic()
    proc = norma("--config", str(cfg), "--allow", "mcp__*", "run", "mcp__closed__x", "-i", "{}")
    assert time.monotonic() - started < 10
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "MCP server closed:" in proc.stderr
    write(tmp_path / "a.txt", "x")
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path": "a.txt"}')
    assert proc.returncode == 0 and proc.stderr == ""


def test_a_provider_on_a_closed_port_is_exit_1_with_a_closed_transcript(
    norma: RunNorma, tmp_path: Path
) -> None:
    cfg = write(
        tmp_path / "c.toml",
        '[providers.p]\nkind = "openai"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n'
        "max_retries = 1\ntimeout = 3\n",
    )
    proc = norma("--config", str(cfg), "run", "-p", "hello", "--session", "qa1", timeout=30)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "127.0.0.1:1" in proc.stderr
    transcript = Path(os.environ["NORMA_HOME"]) / "sessions" / "qa1" / "transcript.jsonl"
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert records[-1]["type"] == "end" and records[-1]["exit_code"] == 1
