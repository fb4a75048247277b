"""PTY shells with a real pseudo-terminal: state across sends, Ctrl-C, closing ends every
process, and ShellSend text judged by the same Bash rule matcher as Bash commands."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RunNorma, results

from norma_cli.core.contract import ToolCall, ToolResult
from norma_cli.runtime import Options, Runtime
from norma_cli.tools.pty_shell import needs_approval, next_pending

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process checks read /proc")
SHELL_TOOLS = ["ShellStart", "ShellSend", "ShellRead", "ShellList", "ShellClose"]


def build(tmp_path: Path, **kw: Any) -> Runtime:
    cfg = tmp_path / "tools.toml"
    cfg.write_text(f"[tools]\nbuiltin = {SHELL_TOOLS!r}\n".replace("'", '"'))
    kw.setdefault("allow", ("ShellStart", "ShellSend"))
    return Runtime.build(
        Options(cwd=tmp_path, config=cfg, with_store=False, interactive=False, **kw)
    )


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = build(tmp_path)
    yield runtime
    runtime.close()


def run(rt: Runtime, name: str, **tool_input: Any) -> ToolResult:
    return rt.executor.run(ToolCall(f"toolu_{time.monotonic_ns()}", name, tool_input))


def start(rt: Runtime, **tool_input: Any) -> str:
    result = run(rt, "ShellStart", **tool_input)
    assert result.exit_code() == 0, result.text()
    shell_id = result.text().split(" as shell ")[1].split()[0]
    return shell_id


def read_until(rt: Runtime, shell_id: str, needle: str, timeout: float = 10) -> str:
    seen = ""
    end = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < end:
        result = run(rt, "ShellRead", shell_id=shell_id, timeout=500)
        assert result.exit_code() == 0, result.text()
        if result.text() != "(no new output)":
            seen += result.text() + "\n"
    assert needle in seen, seen
    return seen


def sleepers(arg: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[:-1]
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argv[-2:] == [b"sleep", arg.encode()] and state not in ("Z", "X"):
            found.append(int(name))
    return found


def in_foreground(pid: int) -> bool:
    """The process's group is its terminal's foreground group (so Ctrl-C reaches it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[2] == fields[5]  # pgrp == tpgid


def test_shell_keeps_state_between_sends(rt: Runtime, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    shell = start(rt)
    assert run(rt, "ShellSend", shell_id=shell, input="cd sub && X=41\n").exit_code() == 0
    run(rt, "ShellSend", shell_id=shell, input='echo "$((X + 1)) in $(basename $(pwd))"\n')
    out = read_until(rt, shell, "42 in sub")
    assert "\x1b" not in out and "\r" not in out  # terminal codes are removed
    # a real terminal: programs see a tty on stdin
    run(rt, "ShellSend", shell_id=shell, input="test -t 0 && echo tty-$((6 * 7))\n")
    read_until(rt, shell, "tty-42")
    listing = run(rt, "ShellList")
    assert listing.text().startswith(f"{shell}  bash  running  pid ")


def test_ctrl_c_interrupts_and_close_ends_every_process(rt: Runtime) -> None:
    shell = start(rt)
    run(rt, "ShellSend", shell_id=shell, input="sleep 3301 &\n")  # a job in a group of its own
    run(rt, "ShellSend", shell_id=shell, input="sleep 3302\n")
    deadline = time.monotonic() + 10
    while not (sleepers("3301") and sleepers("3302")) and time.monotonic() < deadline:
        time.sleep(0.05)
    # bash hands the terminal to the new job just after it starts: wait for that, as a user would
    while not all(map(in_foreground, sleepers("3302"))) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (
        run(rt, "ShellSend", shell_id=shell, input="\x03").exit_code() == 0
    )  # Ctrl-C alone: no approval
    deadline = time.monotonic() + 10
    while sleepers("3302") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleepers("3302") == [] and sleepers("3301") != []
    run(rt, "ShellSend", shell_id=shell, input="echo back-$((1 + 1))\n")
    read_until(rt, shell, "back-2")
    closed = run(rt, "ShellClose", shell_id=shell)
    assert closed.exit_code() == 0 and closed.meta.stage == "tool"
    assert sleepers("3301") == []
    gone = run(rt, "ShellSend", shell_id=shell, input="echo x\n")
    assert gone.exit_code() == 1 and f"no shell '{shell}'" in gone.text()


def test_session_close_ends_shells(tmp_path: Path) -> None:
    runtime = build(tmp_path)
    shell = start(runtime)
    run(runtime, "ShellSend", shell_id=shell, input="sleep 3311 & disown; sleep 3312 &\n")
    deadline = time.monotonic() + 10
    while not (sleepers("3311") and sleepers("3312")) and time.monotonic() < deadline:
        time.sleep(0.05)
    runtime.close()
    assert sleepers("3311") == [] and sleepers("3312") == []


def test_shell_exit_is_reported(rt: Runtime) -> None:
    shell = start(rt, shell="sh")
    run(rt, "ShellSend", shell_id=shell, input="exit 5\n")
    seen = ""
    for _ in range(20):
        seen = run(rt, "ShellRead", shell_id=shell, timeout=500).text()
        if "has exited" in seen:
            break
    assert "[shell " in seen and "has exited with code 5]" in seen
    assert "has exited" in run(rt, "ShellSend", shell_id=shell, input="echo\n").text()


def test_start_checks_its_input(rt: Runtime) -> None:
    bad = run(rt, "ShellStart", shell="python3")
    assert bad.exit_code() == 1 and bad.meta.stage == "schema" and "/shell" in bad.text()
    missing = run(rt, "ShellStart", cwd="nope")
    assert missing.exit_code() == 1 and "/cwd: nope is not a directory" in missing.text()


# ----------------------------------------------------------------------------- policy
def test_bash_deny_rule_denies_shell_send(tmp_path: Path) -> None:
    runtime = build(tmp_path, deny=("Bash(rm:*)",))
    try:
        (tmp_path / "x").mkdir()
        shell = start(runtime)
        denied = run(runtime, "ShellSend", shell_id=shell, input="ls; rm -rf x\n")
        assert (
            denied.exit_code() == 3
            and denied.meta.rule == "Bash(rm:*)"
            and denied.meta.source == "--deny"
        )
        # typed in two pieces, the line is still `rm -rf x`
        assert run(runtime, "ShellSend", shell_id=shell, input="r").exit_code() == 0
        split = run(runtime, "ShellSend", shell_id=shell, input="m -rf x\n")
        assert split.exit_code() == 3 and split.meta.rule == "Bash(rm:*)"
        # Ctrl-U discards the typed line: afterwards, harmless text is harmless again
        assert run(runtime, "ShellSend", shell_id=shell, input="\x15").exit_code() == 0
        assert (
            run(runtime, "ShellSend", shell_id=shell, input="echo fine-$((2 + 1))\n").exit_code()
            == 0
        )
        read_until(runtime, shell, "fine-3")
        assert (tmp_path / "x").is_dir()
        # the policy check explains the sub-commands like it does for Bash
        decision = runtime.engine.evaluate(
            runtime.registry.get("ShellSend"),
            {"shell_id": shell, "input": "ls && rm a\n"},
            runtime.context(),
        )
        assert decision.behavior == "deny"
        assert [s["command"] for s in decision.subcommands if s["decision"] == "deny"] == ["rm a"]
    finally:
        runtime.close()


def test_bash_ask_and_name_rules_reach_shell_send(tmp_path: Path) -> None:
    runtime = build(tmp_path, ask=("Bash(git push:*)",), deny=("Bash(shutdown)",))
    try:
        shell = start(runtime)
        asked = run(runtime, "ShellSend", shell_id=shell, input="git push origin main\n")
        assert (
            asked.exit_code() == 3 and "rule Bash(git push:*) asks" in asked.meta.reason
        )  # nobody to ask
        assert run(runtime, "ShellSend", shell_id=shell, input="shutdown\n").exit_code() == 3
    finally:
        runtime.close()
    runtime = build(tmp_path, deny=("Bash",))
    try:
        shell = start(runtime)
        assert run(runtime, "ShellSend", shell_id=shell, input="echo hi\n").exit_code() == 3
    finally:
        runtime.close()


def test_bash_allow_rules_do_not_allow_shell_send(tmp_path: Path) -> None:
    runtime = build(tmp_path, allow=("ShellStart", "Bash(echo:*)"))
    try:
        shell = start(runtime)
        refused = run(runtime, "ShellSend", shell_id=shell, input="echo hi\n")
        assert refused.exit_code() == 3 and "no rule allows ShellSend" in refused.meta.reason
    finally:
        runtime.close()


def test_editing_keys_need_approval(rt: Runtime) -> None:
    shell = start(rt)
    for text in ("mr -rf x\x14\n", "\x1b[A\n", "rebo\t\n", "ab\x7f\n"):
        result = run(rt, "ShellSend", shell_id=shell, input=text)
        assert result.exit_code() == 3 and "editing keys" in result.meta.reason, text
    assert needs_approval("\x03") is False and needs_approval("ls\n") is False
    assert next_pending("", "ls\ncd /tm") == "cd /tm" and next_pending("cd /tm", "p\n") == ""
    assert next_pending("rm -rf", "\x03") == ""


def test_pty_tool_metadata() -> None:
    from norma_cli.tools import pty_shell as p

    assert (
        p.ShellSendTool.read_only,
        p.ShellSendTool.destructive,
        p.ShellSendTool.requires_approval,
    ) == (False, True, True)
    assert (p.ShellReadTool.read_only, p.ShellReadTool.concurrency_safe) == (True, False)
    assert (p.ShellListTool.read_only, p.ShellListTool.concurrency_safe) == (True, True)
    assert p.ShellStartTool.requires_approval and not p.ShellStartTool.read_only


def test_shells_work_within_one_calls_batch(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "tools.toml"
    cfg.write_text(f"[tools]\nbuiltin = {SHELL_TOOLS!r}\n".replace("'", '"'))
    steps = [
        ("ShellStart", {}),
        ("ShellSend", {"shell_id": "sh_1", "input": "sleep 3321 &\n"}),
        ("ShellSend", {"shell_id": "sh_1", "input": "echo from-$((40 + 2))\n"}),
        ("ShellRead", {"shell_id": "sh_1", "timeout": 3000}),
    ]
    batch = "\n".join(
        json.dumps({"type": "tool_use", "id": f"t{i}", "name": n, "input": inp})
        for i, (n, inp) in enumerate(steps)
    )
    proc = norma(
        "--config", str(cfg), "--allow", "ShellStart", "--allow", "ShellSend",
        "run", "--calls", "-", stdin=batch,
    )  # fmt: skip
    out = results(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "from-42" in out[3]["content"][0]["text"]
    assert sleepers("3321") == []  # norma exited: the shell and its job went with it
