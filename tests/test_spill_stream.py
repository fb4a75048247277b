"""Large outputs stream to the spill file (SPEC §7): a real `norma run Bash` printing tens of
megabytes, byte-exact spills of non-UTF-8 output, and the cap of a tool that returned one huge
text block. Peak memory is checked with a wide margin only (the budget itself is measured by
bench/bench_spill.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import RunNorma, results

from norma_cli.core.contract import CallContext, ToolOutput
from norma_cli.core.output import CAPPED, SPILL, OutputCapper, SpillInfo
from norma_cli.tools.bash import BashTool

MIB = 1024 * 1024
LINE = b"0123456789abcdef\n"

# Started from a small interpreter and reaped with wait4: Linux counts a child's image before
# exec in its ru_maxrss, so spawning from pytest itself would floor the figure at pytest's size.
LAUNCHER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ,
                      file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1)])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status))
"""


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while data := fh.read(MIB):
            sha.update(data)
    return sha.hexdigest()


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB and posix_spawn: Linux")
def test_norma_run_streams_48_mib_of_bash_output_to_the_spill(
    norma: RunNorma, tmp_path: Path
) -> None:
    size = 48 * MIB
    expected = (LINE * (size // len(LINE) + 1))[:size]
    out = tmp_path / "result.json"
    call = json.dumps({"command": f"yes 0123456789abcdef | head -c {size}"})
    cmd = [sys.executable, "-m", "norma_cli", "--allow", "Bash", "run", "Bash", "-i", call]
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", LAUNCHER, str(out), *cmd],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    peak, code = (int(v) for v in done.stdout.split())
    assert code == 0
    res = results(out.read_text())[0]
    spill = res["norma"]["spill"]
    path = Path(spill["path"])
    assert path.stat().st_size == size == spill["bytes"] == spill["chars"]
    assert file_sha256(path) == spill["sha256"] == hashlib.sha256(expected).hexdigest()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind
    # the model sees the head and the pointer, not the output
    text = res["content"][0]["text"]
    assert len(text) < 30_500 and text.startswith(expected[:1000].decode())
    assert spill["path"] in text and spill["sha256"] in text
    # the trace records the same digest
    entry = json.loads(norma("trace", "show", "--json", res["norma"]["trace_id"]).stdout)
    assert entry["spill_sha256"] == spill["sha256"] and entry["spill_path"] == spill["path"]
    # streamed, not held: holding the output whole would need more than all of it
    assert peak < size, f"peak RSS {peak / MIB:.1f} MiB for a {size / MIB:.0f} MiB output"


def test_non_utf8_output_spills_byte_exact_and_the_model_sees_valid_text(tmp_path: Path) -> None:
    # 3-byte and 2-byte characters and invalid bytes, so chunk boundaries split them
    unit = "→é".encode() + b"\xff\xc3(" + b"x\n"
    count = 60_000
    script = tmp_path / "gen.py"
    script.write_text(
        f"import sys\nsys.stdout.buffer.write({unit!r} * {count})\n", encoding="utf-8"
    )
    capper = OutputCapper(spill_dir=tmp_path / "spill")
    ctx = CallContext(
        session_id="t",
        cwd=tmp_path,
        roots=(tmp_path,),
        session=SimpleNamespace(capper=capper),
    )
    out = BashTool().call({"command": f"{sys.executable} {script}"}, ctx)
    assert isinstance(out, ToolOutput) and not out.is_error
    spill = out.metadata[SPILL]
    assert isinstance(spill, SpillInfo) and out.metadata[CAPPED] is True
    data = Path(spill.path).read_bytes()
    assert data == unit * count
    assert spill.bytes == len(data) and spill.sha256 == hashlib.sha256(data).hexdigest()
    text = out.joined_text()
    text.encode("utf-8")  # valid Unicode: no escaped raw byte reaches the model
    assert text.startswith("→é\ufffd\ufffd(x\n→é")


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB: Linux")
def test_capping_one_huge_text_block_does_not_copy_it_whole(tmp_path: Path) -> None:
    # a tool that returned 64 MiB as one block: the cap must not encode a second full copy
    script = """
import hashlib, json, resource, sys
from pathlib import Path
from norma_cli.core.contract import ToolOutput
from norma_cli.core.output import OutputCapper
text = "abcdefghijklmnop" * (4 * 1024 * 1024)
output = ToolOutput.text(text)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
capped = OutputCapper(spill_dir=Path(sys.argv[1])).cap(output)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
spill = capped.metadata["spill"]
print(json.dumps({"growth": after - before, "sha256": spill.sha256, "bytes": spill.bytes,
                  "expected": hashlib.sha256(text.encode()).hexdigest(), "path": spill.path,
                  "shown": len(capped.joined_text())}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "spill")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(done.stdout)
    assert report["bytes"] == 64 * MIB and report["sha256"] == report["expected"]
    assert file_sha256(Path(report["path"])) == report["sha256"]
    assert report["shown"] < 30_500
    assert report["growth"] < 16 * MIB, f"cap grew the peak by {report['growth'] / MIB:.1f} MiB"


def test_a_lone_surrogate_in_a_capped_output_does_not_fail_the_call(tmp_path: Path) -> None:
    # JSON tool outputs may carry lone surrogates; U+DC80..U+DCFF are raw bytes kept by
    # surrogateescape and go back to disk as those bytes, any other one becomes U+FFFD
    capper = OutputCapper(max_chars=100, spill_dir=tmp_path / "spill")
    out = capper.cap(ToolOutput.text("a\ud800b\udcff" * 100))
    spill = out.metadata[SPILL]
    assert isinstance(spill, SpillInfo)
    data = Path(spill.path).read_bytes()
    assert data == b"a\xef\xbf\xbdb\xff" * 100
    assert spill.bytes == len(data) and spill.sha256 == hashlib.sha256(data).hexdigest()
    assert spill.chars == 400
