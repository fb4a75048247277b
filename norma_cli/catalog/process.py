"""Running a ``script`` custom tool: one child process, bounded in time and in output kept.

stdout and stderr go to temporary files rather than pipes, so a chatty script can neither
stall on a full pipe nor make norma hold its whole output in memory; only the first
``max_chars`` characters are read back. On timeout the whole process group is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import IO

from norma_cli.core.record import record

STDERR_TAIL = 2000


@record
class Finished:
    code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool

    def tail(self) -> str:
        text = self.stderr.strip()[-STDERR_TAIL:]
        return f"\n{text}" if text else ""


def _read_head(fh: IO[bytes], max_chars: int) -> tuple[str, bool]:
    fh.seek(0)
    raw = fh.read(max_chars * 4 + 4)  # UTF-8: at most 4 bytes a character
    text = raw.decode("utf-8", "replace")
    more = bool(fh.read(1)) or len(text) > max_chars
    return text[:max_chars], more


def run_with_limits(
    argv: list[str], stdin_text: str, *, cwd: Path, timeout: float, max_chars: int
) -> Finished:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            return Finished(
                None, "", f"cannot start {argv[0]}: {exc.strerror or exc}", False, False
            )
        timed_out = False
        try:
            proc.communicate(stdin_text.encode("utf-8"), timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait()
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            raise
        stdout, truncated = _read_head(out, max_chars)
        stderr, _ = _read_head(err, STDERR_TAIL * 4)
        return Finished(
            None if timed_out else proc.returncode, stdout, stderr, timed_out, truncated
        )
