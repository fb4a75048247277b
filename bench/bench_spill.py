"""Peak RSS of a one-shot `norma run Bash` whose command prints 1 GiB, beside bare Python doing
the same spill (the command's output read in 64 KiB chunks, hashed, written to a file).

SPEC §7/§15 budget: spilling a 1 GB tool output keeps peak RSS under 150 MB (checked here as
150,000,000 bytes). Two outputs are measured: one line with no newline at all
(`head -c N /dev/zero | tr '\\0' x`) and 17-byte lines (`yes 0123456789abcdef | head -c N`).
Each measured process is started by a small launcher that reaps it with os.wait4, so every
figure is that one process's peak, never a max over other runs. The figure includes the
children the process reaped (bash, head, tr, yes): the "command alone" row shows their share
(it also shows the measurement floor: the launcher's image before exec, about 8 MB).

The bench also checks that the spill file is exactly N bytes and that its sha256 equals the
one in the result (`norma.spill`), in the trace entry (`spill_sha256` and the `spilled`
event) and the one bare Python computed. Nothing is asserted: figures print with OK/OVER.

Needs about 2 x N bytes of free disk in the temp dir (checked first); all files are deleted
at the end. Compile first, since the environment disables bytecode writing:
    .venv/bin/python -m compileall -q norma_cli && .venv/bin/python bench/bench_spill.py
Quick run: BENCH_SPILL_BYTES=67108864 .venv/bin/python bench/bench_spill.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SIZE = int(os.environ.get("BENCH_SPILL_BYTES", str(1 << 30)))
BUDGET_BYTES = 150_000_000
TIMEOUT_MS = 600_000

COMMANDS = {
    "one line, no newline": f"head -c {SIZE} /dev/zero | tr '\\0' x",
    "17-byte lines": f"yes 0123456789abcdef | head -c {SIZE}",
}

# The baseline: what any spill must do at least (read, hash, write in 64 KiB chunks).
BARE_SPILL = """
import hashlib, os, subprocess, sys
proc = subprocess.Popen(["bash", "-c", sys.argv[1]], stdout=subprocess.PIPE)
sha, size, fd = hashlib.sha256(), 0, proc.stdout.fileno()
with open(sys.argv[2], "wb") as out:
    while data := os.read(fd, 65536):
        sha.update(data)
        size += len(data)
        out.write(data)
    out.flush()
    os.fsync(out.fileno())
proc.wait()
print(sha.hexdigest(), size)
"""


# Each measured process is started by this small launcher (isolated, no site: about 8 MB),
# which reaps it with wait4 and prints its ru_maxrss. Linux counts the image a child had
# before exec in its ru_maxrss, so spawning from the bench itself would floor every figure at
# the bench's own size; and RUSAGE_CHILDREN would be a max over all the bench's children.
LAUNCHER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
start = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ,
                      file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1)])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, time.perf_counter() - start, os.waitstatus_to_exitcode(status))
"""


@dataclass
class Run:
    peak_bytes: int
    wall_s: float
    code: int


def measured(cmd: list[str], env: dict[str, str], cwd: Path, stdout: Path | None) -> Run:
    """Peak RSS (of ``cmd`` and the children it reaped), wall time and exit code of one run."""
    launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(stdout or os.devnull)]
    done = subprocess.run(
        [*launcher, *cmd], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    maxrss, wall, code = done.stdout.split()
    # ru_maxrss is KiB on Linux, bytes on macOS
    peak = int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024
    return Run(peak, float(wall), int(code))


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while data := fh.read(1 << 20):
            sha.update(data)
    return sha.hexdigest()


def mb(n: int) -> str:
    return f"{n / 1e6:7.1f} MB"


def row(label: str, run: Run, note: str = "") -> None:
    print(f"  {label:<28}: {mb(run.peak_bytes)}  {run.wall_s:6.2f} s  exit {run.code}{note}")


def check(label: str, ok: bool) -> None:
    print(f"    {label:<52} {'yes' if ok else 'NO'}")


def one(name: str, command: str, work: Path, env: dict[str, str]) -> tuple[int, bool]:
    """Measure one output shape; returns (norma's peak bytes, whether the spill is intact)."""
    print(f"\n{name}: `{command}`  ({SIZE:,} bytes)")
    alone = measured(["bash", "-c", command], env, work, None)
    row("command alone (> /dev/null)", alone)

    bare_out = work / "bare.out"
    bare_file = work / "bare.txt"
    bare = measured(
        [sys.executable, "-c", BARE_SPILL, command, str(bare_file)], env, work, bare_out
    )
    bare_sha, _, bare_size = bare_out.read_text().strip().partition(" ")
    bare_file.unlink(missing_ok=True)
    row("bare Python spill (baseline)", bare)

    norma_out = work / "norma.json"
    norma_in = json.dumps({"command": command, "timeout": TIMEOUT_MS})
    norma = measured(
        [sys.executable, "-m", "norma_cli", "--allow", "Bash", "run", "Bash", "-i", norma_in],
        env,
        work,
        norma_out,
    )
    verdict = "OK" if norma.peak_bytes < BUDGET_BYTES else "OVER"
    row("norma run Bash", norma, f"   (budget 150 MB: {verdict})")
    print(
        f"    norma - bare Python: {mb(norma.peak_bytes - bare.peak_bytes).strip()}; "
        f"norma / bare: {norma.peak_bytes / bare.peak_bytes:.2f}x peak, "
        f"{norma.wall_s / bare.wall_s:.2f}x wall"
    )

    result = json.loads(norma_out.read_text()) if norma_out.stat().st_size else {}
    meta = result.get("norma") or {}
    spill = meta.get("spill") or {}
    path = Path(spill["path"]) if spill.get("path") else None
    if path is None or not path.is_file():
        print(f"    no spill file in the result: {norma_out.read_text()[:300]!r}")
        return norma.peak_bytes, False
    size = path.stat().st_size
    on_disk = file_sha256(path)
    path.unlink()
    trace = subprocess.run(
        [sys.executable, "-m", "norma_cli", "trace", "show", "--json", meta["trace_id"]],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
    )
    entry = json.loads(trace.stdout) if trace.returncode == 0 else {}
    spilled = [e for e in entry.get("events", []) if e.get("state") == "spilled"]
    shown = sum(len(b.get("text", "")) for b in result.get("content", []))
    print(f"    spill file: {size:,} bytes ({size / (1 << 30):.3f} GiB), sha256 {on_disk}")
    print(
        f"    the model sees {shown:,} characters; the result line is {len(norma_out.read_bytes()):,} bytes"
    )
    checks = [
        (f"file size == {SIZE:,} bytes == norma.spill.bytes", size == SIZE == spill.get("bytes")),
        ("file sha256 == norma.spill.sha256", on_disk == spill.get("sha256")),
        ("file sha256 == trace spill_sha256", on_disk == entry.get("spill_sha256")),
        ("file sha256 == trace `spilled` event", [e.get("sha256") for e in spilled] == [on_disk]),
        ("file sha256 == bare Python's sha256", on_disk == bare_sha and bare_size == str(SIZE)),
        ("the model sees only the head (< 31,000 chars)", 0 < shown < 31_000),
    ]
    for label, ok in checks:
        check(label, ok)
    return norma.peak_bytes, norma.code == 0 and all(ok for _, ok in checks)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="norma-bench-spill-"))
    try:
        free = shutil.disk_usage(work).free
        need = 2 * SIZE + (256 << 20)  # the norma spill and the bare copy never coexist; margin
        print(f"spill of a {SIZE:,}-byte tool output; temp dir {work}")
        print(f"free disk there: {free / 1e9:.1f} GB (need about {need / 1e9:.1f} GB)")
        if free < need:
            print(
                "NOT ENOUGH DISK SPACE: free some, point TMPDIR elsewhere, or set a smaller "
                "BENCH_SPILL_BYTES. Nothing was measured."
            )
            return
        env = {**os.environ, "NORMA_HOME": str(work / "home"), "NORMA_LOAD_PLUGINS": ""}
        print()
        print("peak RSS (wait4 ru_maxrss of that one process) and wall time")
        row("python -c pass", measured([sys.executable, "-c", "pass"], env, work, None))
        runs = [one(name, command, work, env) for name, command in COMMANDS.items()]
        worst = max(peak for peak, _ in runs)
        print(
            f"\nworst norma peak RSS: {mb(worst).strip()}   "
            f"(budget 150 MB: {'OK' if worst < BUDGET_BYTES else 'OVER'})"
        )
        intact = all(ok for _, ok in runs)
        print(f"spill files whole and digests consistent: {'yes' if intact else 'NO'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
