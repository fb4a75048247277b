"""`norma run` and friends as a user runs them: real subprocesses, real files, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RunNorma, results

HEAVY = (
    "pydantic",
    "httpx",
    "mcp",
    "jsonschema",
    "jsonschema_rs",
    "tree_sitter",
    "tree_sitter_bash",
    "pluggy",
    "sqlite3",
)


@pytest.mark.parametrize(
    "args", [["--help"], ["--version"], ["run", "--help"], ["tools", "--help"]]
)
def test_help_imports_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "norma_cli", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    imported = {
        m.group(1).split(".")[0] for m in re.finditer(r"\|\s+([\w.]+)\s*$", proc.stderr, re.M)
    }
    assert imported.isdisjoint(HEAVY), sorted(imported & set(HEAVY))
    assert "norma" in proc.stdout


def test_read_readme_prints_tool_result(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# hello\nworld\n")
    proc = norma("run", "Read", "-i", '{"file_path":"README.md"}')
    assert proc.returncode == 0, proc.stderr
    [res] = results(proc.stdout)
    assert res["type"] == "tool_result" and res["is_error"] is False
    assert res["tool_use_id"].startswith("toolu_")
    assert "# hello" in res["content"][0]["text"] and "world" in res["content"][0]["text"]
    meta = res["norma"]
    assert meta["decision"] == "allow" and meta["trace_id"] and meta["spill"] is None
    assert set(meta) >= {
        "decision",
        "stage",
        "rule",
        "source",
        "trace_id",
        "duration_ms",
        "spill",
        "pending_id",
    }


def test_text_and_arg_forms(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    proc = norma("run", "Read", "--arg", "file_path=a.txt", "--arg", "offset=2", "--text")
    assert proc.returncode == 0 and "beta" in proc.stdout and "alpha" not in proc.stdout
    assert not proc.stdout.lstrip().startswith("{")


def test_input_from_file_and_unreadable_file(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("from file")
    (tmp_path / "in.json").write_text('{"file_path": "a.txt"}')
    assert norma("run", "Read", "-i", "@in.json").returncode == 0
    proc = norma("run", "Read", "-i", "@missing.json")
    assert proc.returncode == 2 and "cannot read input file" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("raw", ['{"file_path":', "[1, 2]", "nope", '"str"'])
def test_malformed_input_is_exit_2_one_line(norma: RunNorma, raw: str) -> None:
    proc = norma("run", "Read", "-i", raw)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("norma: error:")
    assert proc.stdout == ""


def test_unknown_tool_and_schema_errors_exit_1(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma("run", "Nope", "-i", "{}")
    assert proc.returncode == 1 and "unknown tool: Nope" in proc.stdout
    proc = norma("run", "Read", "-i", '{"file_path": 3, "bogus": true}')
    assert proc.returncode == 1
    text = results(proc.stdout)[0]["content"][0]["text"]
    assert "/file_path" in text and "bogus" in text


def test_deny_flag_plan_mode_and_bypass(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    assert norma("--deny", "Read", "run", "Read", "-i", '{"file_path":"a.txt"}').returncode == 3
    proc = norma("--mode", "plan", "run", "Write", "-i", '{"file_path":"b.txt","content":"y"}')
    assert proc.returncode == 3 and not (tmp_path / "b.txt").exists()
    proc = norma(
        "--mode",
        "bypassPermissions",
        "--deny",
        "Write",
        "run",
        "Write",
        "-i",
        '{"file_path":"b.txt","content":"y"}',
    )
    assert proc.returncode == 3 and not (tmp_path / "b.txt").exists()
    proc = norma(
        "--mode", "bypassPermissions", "run", "Write", "-i", '{"file_path":"b.txt","content":"y"}'
    )
    assert proc.returncode == 0 and (tmp_path / "b.txt").read_text() == "y"


def test_non_interactive_ask_is_denied(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma("run", "Write", "-i", '{"file_path":"b.txt","content":"y"}')
    assert proc.returncode == 3
    assert (
        "no approver available" in results(proc.stdout)[0]["norma"]["reason"]
        or "no approver" in proc.stdout
    )


def test_dry_run_decides_without_running(norma: RunNorma, tmp_path: Path) -> None:
    proc = norma(
        "--allow", "Write", "run", "Write", "-i", '{"file_path":"b.txt","content":"y"}', "--dry-run"
    )
    assert proc.returncode == 0 and not (tmp_path / "b.txt").exists()
    assert results(proc.stdout)[0]["norma"]["rule"] == "Write"
    proc = norma("run", "Write", "-i", '{"file_path":"b.txt","content":"y"}', "--dry-run")
    assert proc.returncode == 4  # would ask
    assert (
        norma(
            "--deny", "Write", "run", "Write", "-i", '{"file_path":"b","content":""}', "--dry-run"
        ).returncode
        == 3
    )


def write_hook_config(tmp_path: Path, body: str, **extra: str) -> Path:
    hook = tmp_path / "hook.sh"
    hook.write_text("#!/bin/sh\n" + body)
    hook.chmod(0o755)
    cfg = tmp_path / "cfg.toml"
    lines = ["[[hooks.PreToolUse]]", f'command = "{hook}"'] + [
        f"{k} = {v}" for k, v in extra.items()
    ]
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def test_command_hook_exit_2_blocks_run(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    cfg = write_hook_config(
        tmp_path, "cat >/dev/null\necho 'reading is forbidden today' >&2\nexit 2\n"
    )
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path":"a.txt"}')
    assert proc.returncode == 3
    res = results(proc.stdout)[0]
    assert "reading is forbidden today" in res["content"][0]["text"]
    assert res["norma"]["stage"] == "hook" and res["norma"]["source"] == f"{cfg}:1"


def test_hanging_hook_blocks_or_is_ignored(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    cfg = write_hook_config(tmp_path, "sleep 30\n", timeout="1")
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path":"a.txt"}')
    assert proc.returncode == 3 and "timed out" in proc.stdout
    cfg = write_hook_config(tmp_path, "sleep 30\n", timeout="1", on_error='"ignore"')
    assert norma("--config", str(cfg), "run", "Read", "-i", '{"file_path":"a.txt"}').returncode == 0


def test_hook_rewrite_to_denied_path_is_refused(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("fine")
    (tmp_path / "secret.txt").write_text("secret")
    cfg = write_hook_config(
        tmp_path,
        """cat >/dev/null; echo '{"hookSpecificOutput": {"updatedInput": {"file_path": "secret.txt"}}}'\n""",
    )
    with cfg.open("a") as fh:
        fh.write('[permissions]\ndeny = ["Read(./secret.txt)"]\n')
    proc = norma("--config", str(cfg), "run", "Read", "-i", '{"file_path":"a.txt"}')
    assert proc.returncode == 3 and "secret" not in results(proc.stdout)[0]["content"][0][
        "text"
    ].replace("secret.txt", "")


def test_output_over_cap_points_at_spill(norma: RunNorma, tmp_path: Path) -> None:
    import hashlib

    (tmp_path / "big.txt").write_text("".join(f"line {i}\n" for i in range(20_000)))
    proc = norma("run", "Read", "-i", '{"file_path":"big.txt","limit":20000}')
    assert proc.returncode == 0
    res = results(proc.stdout)[0]
    spill = res["norma"]["spill"]
    assert spill and spill["path"] in res["content"][0]["text"]
    assert hashlib.sha256(Path(spill["path"]).read_bytes()).hexdigest() == spill["sha256"]
    assert len(res["content"][0]["text"]) < 30_500


def test_calls_batch_anthropic_and_openai(norma: RunNorma, tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}")
    lines = []
    for i in range(1000):
        if i % 2:
            lines.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{i}",
                    "name": "Read",
                    "input": {"file_path": f"f{i % 5}.txt"},
                }
            )
        else:
            lines.append(
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": "Read",
                        "arguments": json.dumps({"file_path": f"f{i % 5}.txt"}),
                    },
                }
            )
    lines[10] = {
        "type": "tool_use",
        "id": "toolu_w",
        "name": "Write",
        "input": {"file_path": "w.txt", "content": "w"},
    }
    lines[11] = {"type": "tool_use", "id": "toolu_x", "name": "Nope", "input": {}}
    batch = tmp_path / "calls.jsonl"
    batch.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    proc = norma("run", "--calls", str(batch), "--max-concurrency", "4")
    out = results(proc.stdout)
    assert len(out) == 1000
    ids = [x.get("id") for x in lines]
    assert [r.get("tool_use_id") or r.get("tool_call_id") for r in out] == ids
    assert out[0]["role"] == "tool" and "file 0" in out[0]["content"]
    assert out[1]["type"] == "tool_result" and "file 1" in out[1]["content"][0]["text"]
    assert proc.returncode == 3  # the Write was denied (no approver); deny outranks the error
    proc = norma("run", "--calls", "-", stdin="\n".join(json.dumps(x) for x in lines[:3]))
    assert proc.returncode == 0 and len(results(proc.stdout)) == 3


def test_calls_malformed_line_runs_nothing(norma: RunNorma, tmp_path: Path) -> None:
    batch = tmp_path / "calls.jsonl"
    batch.write_text(
        '{"type":"tool_use","id":"a","name":"Write","input":{"file_path":"z","content":""}}\n{oops\n'
    )
    proc = norma("--allow", "Write", "run", "--calls", str(batch))
    assert proc.returncode == 2 and f"{batch}:2" in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "z").exists()
    batch.write_text(
        '{"type":"tool_use","id":"a","name":"Read","input":{}}\n{"type":"tool_use","id":"a","name":"Read","input":{}}\n'
    )
    proc = norma("run", "--calls", str(batch))
    assert proc.returncode == 2 and "duplicate" in proc.stderr


def test_tools_list_and_show(norma: RunNorma) -> None:
    listed = json.loads(norma("tools", "list", "--json").stdout)
    names = [t["name"] for t in listed]
    assert names == sorted(
        [
            "Bash",
            "Edit",
            "Glob",
            "Grep",
            "LS",
            "Monitor",
            "MultiEdit",
            "Read",
            "TaskList",
            "TaskOutput",
            "TaskStop",
            "Write",
        ]
    )
    read = next(t for t in listed if t["name"] == "Read")
    assert read["read_only"] and read["concurrency_safe"]
    shown = json.loads(norma("tools", "show", "Write", "--json").stdout)
    assert shown["input_schema"]["required"] == ["file_path", "content"]
    assert shown["read_only"] is False
    proc = norma("tools", "show", "Nope")
    assert proc.returncode == 1 and "unknown tool" in proc.stderr


def test_trace_row_written_for_one_shot(
    norma: RunNorma, tmp_path: Path, isolated_env: Path
) -> None:
    import os
    import sqlite3

    (tmp_path / "a.txt").write_text("x")
    norma("run", "Read", "-i", '{"file_path":"a.txt"}')
    db = Path(os.environ["NORMA_HOME"]) / "norma.db"
    rows = sqlite3.connect(db).execute("SELECT tool, decision, status FROM traces").fetchall()
    assert rows == [("Read", "allow", "completed")]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"file_path": "a.txt", "limit": 1e400}', "too large"),
        ('{"file_path": "a.txt", "offset": NaN}', "NaN is not valid JSON"),
        ('{"file_path": "a.txt", "offset": -Infinity}', "Infinity is not valid JSON"),
    ],
)
def test_hostile_json_is_exit_2_one_line(
    norma: RunNorma, tmp_path: Path, raw: str, message: str
) -> None:
    (tmp_path / "in.json").write_text(raw)
    proc = norma("run", "Read", "-i", "@in.json")
    assert proc.returncode == 2 and message in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    (tmp_path / "calls.jsonl").write_text(
        f'{{"type": "tool_use", "id": "a", "name": "Read", "input": {raw}}}\n'
    )
    proc = norma("run", "--calls", "calls.jsonl")
    assert proc.returncode == 2 and "calls.jsonl:1" in proc.stderr and message in proc.stderr


def test_nul_byte_in_a_path_is_refused_cleanly(norma: RunNorma) -> None:
    proc = norma("run", "Read", "-i", '{"file_path": "a\\u0000b"}')
    assert proc.returncode == 3
    res = results(proc.stdout)[0]
    assert (
        "NUL byte" in res["content"][0]["text"]
        and "internal error" not in res["content"][0]["text"]
    )
