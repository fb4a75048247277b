"""Shared fixtures: every test gets its own NORMA_HOME and config dirs, and no plugins load
unless a test asks for them (a developer's installed plugins never leak into the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("norma-home")
    monkeypatch.setenv("NORMA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "xdg-data"))
    monkeypatch.setenv("NORMA_LOAD_PLUGINS", "")
    monkeypatch.delenv("NORMA_CONFIG", raising=False)
    return home


RunNorma = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def norma(tmp_path: Path) -> RunNorma:
    """Run the real `norma` CLI in a subprocess (cwd defaults to tmp_path)."""

    def run(
        *args: str,
        cwd: Path | None = None,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "norma_cli", *args],
            cwd=cwd or tmp_path,
            input=stdin,
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
        )

    return run


def results(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]
