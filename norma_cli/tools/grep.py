"""The Grep tool: content search with ripgrep, or a pure-Python engine (SPEC §6).

ripgrep comes from the ``ripgrep`` PyPI package norma depends on (``norma_cli.tools.ripgrep``
finds it); ``NORMA_DISABLE_RIPGREP`` forces the Python engine (``grep_python``), which is
also used when no ``rg`` can be found. Both engines return the same ``SearchResult`` and the
text is built here, so a result looks the same whichever engine ran; the first line and
``metadata["engine"]`` say which one did.

Confinement: the search path is located like every file tool's path (inside a working root,
or granted by an allow rule naming it), and ``file_paths`` returns it so Read rules govern
Grep. Neither engine follows symlinks while walking. The Python engine opens everything
beneath a directory descriptor with ``O_NOFOLLOW``; ripgrep opens by path, so a directory
swapped for a symlink *during* a search races rg's own open — the same window any external
search program has.
"""

from __future__ import annotations

import os
import re
import stat
import time
from typing import Any

from norma_cli.core.contract import CallContext, Tool, ToolOutput
from norma_cli.errors import NormaError
from norma_cli.policy.filescope import read_filter
from norma_cli.tools.confine import locate
from norma_cli.tools.grep_model import MODES, FileHits, Mode, Query, SearchError, SearchResult

SEARCH_TIMEOUT = 60.0  # seconds; what was found by then is returned with a note
MAX_LINE_CHARS = 2000


def _schema() -> dict[str, Any]:
    context = 'Requires output_mode "content"; ignored otherwise.'
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "The regular expression to search file contents for "
                "(ripgrep syntax, e.g. 'log.*Error', 'function\\s+\\w+').",
            },
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "File or directory to search in (default: the working directory).",
            },
            "glob": {
                "type": "string",
                "description": "Only search files matching this glob, e.g. '*.js', '*.{ts,tsx}', "
                "'src/**/*.py'; several may be separated by spaces. '!pattern' excludes.",
            },
            "type": {
                "type": "string",
                "description": "Only search files of this ripgrep type, e.g. 'py', 'js', 'rust', "
                "'go', 'java'. More efficient than glob for standard file types.",
            },
            "output_mode": {
                "type": "string",
                "enum": list(MODES),
                "default": "files_with_matches",
                "description": "'content' shows matching lines, 'files_with_matches' shows file "
                "paths (default), 'count' shows the number of matching lines per file.",
            },
            "-i": {"type": "boolean", "description": "Case-insensitive search."},
            "-n": {
                "type": "boolean",
                "default": True,
                "description": f"Show line numbers (default true). {context}",
            },
            "-A": {
                "type": "integer",
                "minimum": 0,
                "description": f"Lines to show after each match. {context}",
            },
            "-B": {
                "type": "integer",
                "minimum": 0,
                "description": f"Lines to show before each match. {context}",
            },
            "-C": {
                "type": "integer",
                "minimum": 0,
                "description": f"Lines to show before and after each match. {context}",
            },
            "multiline": {
                "type": "boolean",
                "description": "Let patterns span lines ('.' matches newlines). Default false.",
            },
            "head_limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Show only the first N lines (content), files "
                "(files_with_matches) or entries (count). Default: all.",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }


class GrepTool(Tool):
    name = "Grep"
    description = (
        "Search file contents with a regular expression inside the working roots (ripgrep). "
        "Returns matching file paths (newest first, the default), matching lines, or match "
        "counts per file. Hidden files are searched; .gitignore/.ignore rules are honoured and "
        "version-control directories skipped. The first line says how much was found and "
        "which engine ran."
    )
    prompt = (
        "Use Grep to find where something is written; never run grep or rg through Bash. The "
        "pattern is a regular expression in ripgrep syntax: escape literal braces and dots "
        "('interface\\{\\}', 'foo\\.bar'). Narrow the search with `path`, `glob` ('*.py', "
        "'**/*.{ts,tsx}') or `type` ('py', 'js'). Start with the default output_mode "
        "'files_with_matches', then use 'content' (with -n line numbers, -A/-B/-C context) on "
        "the files that matter, or 'count' to see how often it occurs. Patterns match within "
        "one line unless `multiline` is true. Use head_limit to keep large results short."
    )
    input_schema = _schema()
    read_only = True
    concurrency_safe = True
    requires_approval = False

    def file_paths(self, tool_input: dict[str, Any], ctx: CallContext) -> list[str]:
        path = tool_input.get("path") or "."
        return [path] if isinstance(path, str) else []

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        try:
            return self.run(tool_input, ctx)
        except SearchError as exc:
            return ToolOutput.error(f"Grep: {exc}")
        except NormaError as exc:
            return ToolOutput.error(str(exc))
        except FileNotFoundError:
            return ToolOutput.error(f"{tool_input.get('path') or '.'}: does not exist")
        except OSError as exc:
            return ToolOutput.error(f"{tool_input.get('path') or '.'}: {exc.strerror or exc}")

    def run(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        query = build_query(tool_input, ctx)
        result = run_search(query)
        hide = read_filter(ctx)
        if hide is not None:  # Read deny/ask rules protect these paths from the search too
            # silently: even a count of hidden files would say the pattern occurs in them
            result.files = [h for h in result.files if not hide.hides(h.path, ctx)]
        return render(result, query, tool_input)


def build_query(
    tool_input: dict[str, Any], ctx: CallContext, timeout: float = SEARCH_TIMEOUT
) -> Query:
    raw = tool_input.get("path") or "."
    pattern = tool_input["pattern"]
    for key in ("pattern", "path", "glob", "type"):
        value = tool_input.get(key)
        if isinstance(value, str) and "\x00" in value:
            raise SearchError(f"{key} contains a NUL byte")
    loc = locate(raw, ctx)
    st = os.stat(loc.path, follow_symlinks=False)
    is_dir = stat.S_ISDIR(st.st_mode)
    if not is_dir and not stat.S_ISREG(st.st_mode):
        raise SearchError(f"{raw}: not a regular file or directory")
    mode: Mode = tool_input.get("output_mode") or "files_with_matches"
    context = tool_input.get("-C") or 0
    before = tool_input.get("-B", context) if mode == "content" else 0
    after = tool_input.get("-A", context) if mode == "content" else 0
    return Query(
        pattern=pattern,
        root=str(loc.path),
        is_dir=is_dir,
        mode=mode,
        ignore_case=bool(tool_input.get("-i")),
        before=int(before or 0),
        after=int(after or 0),
        multiline=bool(tool_input.get("multiline")),
        globs=tuple(split_globs(tool_input.get("glob") or "")),
        types=tuple(t for t in re.split(r"[\s,]+", tool_input.get("type") or "") if t),
        deadline=time.monotonic() + timeout,
        base=str(loc.root),
        rel=loc.rel,
    )


def split_globs(text: str) -> list[str]:
    """Globs separated by whitespace; a comma separates too, except inside ``{a,b}``."""
    out: list[str] = []
    for word in text.split():
        if "{" in word and "}" in word:
            out.append(word)
        else:
            out.extend(g for g in word.split(",") if g)
    return out


def run_search(query: Query) -> SearchResult:
    """ripgrep when it is available and not disabled, else the Python engine."""
    from norma_cli.tools import ripgrep

    rg = ripgrep.find_ripgrep()
    fallback_note = ""
    if rg is not None:
        try:
            return ripgrep.search(rg, query)
        except OSError as exc:  # rg present but not runnable (wrong architecture, noexec...)
            fallback_note = f"ripgrep at {rg.path} could not run ({exc.strerror or exc})"
    from norma_cli.tools import grep_python

    result = grep_python.search(query)
    if fallback_note:
        result.notes.insert(0, fallback_note)
    return result


# ----------------------------------------------------------------------------- text
def render(result: SearchResult, q: Query, tool_input: dict[str, Any]) -> ToolOutput:
    numbers = tool_input.get("-n", True) is not False
    head_limit = tool_input.get("head_limit")
    files = result.files
    if q.mode == "files_with_matches":
        files = sorted(files, key=lambda h: (-_mtime(h.path), h.path))
        body = [h.path for h in files]
        total = len(files)
        header = f"Found {total} file{_s(total)}"
    elif q.mode == "count":
        files = sorted(files, key=lambda h: h.path)
        body = [f"{h.path}:{h.count}" for h in files]
        total = sum(h.count for h in files)
        header = (
            f"Found {total} match{'es' if total != 1 else ''} in {len(files)} file{_s(len(files))}"
        )
    else:
        files = sorted(files, key=lambda h: h.path)
        body = _content_lines(files, numbers, bool(q.before or q.after))
        total = sum(1 for h in files for _, is_match, _ in h.lines if is_match)
        header = f"Found {total} matching line{_s(total)} in {len(files)} file{_s(len(files))}"
    if not files:
        header = "No matches found"
    header += f" (engine: {result.engine})"
    shown = body
    if head_limit is not None and len(body) > head_limit:
        shown = body[:head_limit]
    parts = [header, *shown]
    if len(shown) < len(body):
        parts.append(
            f"\n[showing the first {len(shown)} of {len(body)} lines; raise head_limit to see more]"
        )
    parts.extend(f"\n[{note}]" for note in result.notes)
    metadata: dict[str, Any] = {
        "engine": result.engine,
        "mode": q.mode,
        "files": len(files),
        "matches": total if files else 0,
        "truncated": len(shown) < len(body) or bool(result.notes),
        "path": q.root,
    }
    return ToolOutput.text("\n".join(parts), **metadata)


def _content_lines(files: list[FileHits], numbers: bool, context: bool) -> list[str]:
    out: list[str] = []
    for h in files:
        if h.binary:
            if context and out:
                out.append("--")
            out.append(f"{h.path}: binary file matches")
            continue
        prev = None
        for n, is_match, text in h.lines:
            if context and out and (prev is None or n != prev + 1):
                out.append("--")
            prev = n
            sep = ":" if is_match else "-"
            text = text.removesuffix("\r")
            if len(text) > MAX_LINE_CHARS:
                text = text[:MAX_LINE_CHARS] + f"… [line truncated at {MAX_LINE_CHARS} characters]"
            out.append(f"{h.path}{sep}{n}{sep}{text}" if numbers else f"{h.path}{sep}{text}")
    return out


def _mtime(path: str) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return 0


def _s(n: int) -> str:
    return "" if n == 1 else "s"


__all__ = ["GrepTool", "build_query", "render", "run_search", "split_globs"]
