"""A full disk: one clear error line, no result without its record, a chain that still verifies.

Uses a small tmpfs (needs root, as CI and the sessions here have); skipped where mount is refused.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RunNorma, results


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    with open(disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


def test_store_on_a_full_disk(norma: RunNorma, tmp_path: Path, small_disk: Path) -> None:
    env = {"NORMA_HOME": str(small_disk / "home")}
    (tmp_path / "a.txt").write_text("alpha")
    assert norma("run", "Read", "-i", '{"file_path": "a.txt"}', env=env).returncode == 0
    fill(small_disk)
    for extra in ({}, {"NORMA_NO_FAST_PATH": "1"}):
        proc = norma("run", "Read", "-i", '{"file_path": "a.txt"}', env={**env, **extra})
        # exit 1 when the trace cannot be written, 2 when the store cannot even be opened
        # (the catalog's on_error = "fail" refuses to run): one line naming the store either way
        assert proc.returncode in (1, 2)
        assert proc.stdout == ""  # no result is printed without its record
        assert proc.stderr.count("\n") == 1 and str(small_disk / "home" / "norma.db") in proc.stderr
        assert "Traceback" not in proc.stderr
    (small_disk / "filler").unlink()
    verify = norma("trace", "verify", env=env)
    assert verify.returncode == 0 and "1 entries" in verify.stdout


def test_spill_on_a_full_disk_still_gives_the_head(
    norma: RunNorma, tmp_path: Path, small_disk: Path
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[output]\nspill_dir = "{small_disk / "spill"}"\nmax_chars = 1000\n')
    (tmp_path / "big.txt").write_text("line\n" * 3000)
    fill(small_disk)
    proc = norma(
        "--config", str(cfg), "run", "Read", "-i", '{"file_path": "big.txt", "limit": 3000}'
    )
    assert proc.returncode == 0
    [res] = results(proc.stdout)
    text = res["content"][0]["text"]
    assert (
        text.startswith("     1\tline")
        and "could not be saved" in text
        and res["norma"]["spill"] is None
    )
    assert not [p for p in (small_disk / "spill").iterdir() if p.name.startswith(".spill-")]


def test_bash_output_on_a_full_disk_still_gives_the_head(
    norma: RunNorma, tmp_path: Path, small_disk: Path
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[output]\nspill_dir = "{small_disk / "spill"}"\nmax_chars = 1000\n')
    fill(small_disk)
    proc = norma(
        "--config",
        str(cfg),
        "--allow",
        "Bash(seq:*)",
        "run",
        "Bash",
        "-i",
        '{"command": "seq 1 100000"}',
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [res] = results(proc.stdout)
    text = res["content"][0]["text"]
    assert (
        text.startswith("1\n2\n3\n")
        and "could not be saved" in text
        and res["norma"]["spill"] is None
    )
