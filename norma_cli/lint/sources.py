"""Reading tool files: text to data, data to tool definitions, pointers back to lines."""

from __future__ import annotations

import gc
import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple

from norma_cli.core.record import field, record
from norma_cli.errors import UsageError
from norma_cli.lint.rules import Severity
from norma_cli.lint.walk import split_pointer

SCHEMA_KEYS = ("input_schema", "inputSchema", "parameters", "parametersJsonSchema")


@contextmanager
def paused_gc() -> Iterator[None]:
    """Run without the cyclic garbage collector.

    Parsed JSON and TOML hold no reference cycles, yet a 10,000-tool file allocates millions of
    containers, each allocation burst triggering a collection that rescans everything still
    alive: a third of the run time, for nothing.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class LintInputError(UsageError):
    """A file that cannot be read or parsed, or that holds no recognisable tool definitions."""


class _Locator:
    """Maps a JSON pointer to a 1-based line in the source text (best effort; None if unknown)."""

    def line_of(self, pointer: str) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError


_WS = re.compile(r"[ \t\n\r]*")
_EMPTY_OBJECT = re.compile(r"[ \t\n\r]*\}")
_EMPTY_ARRAY = re.compile(r"[ \t\n\r]*\]")
# A key (no raw control characters, as JSON demands), its colon, and the space around them.
_MEMBER = re.compile(r'[ \t\n\r]*"((?:[^"\\\x00-\x1f]|\\.)*)"[ \t\n\r]*:[ \t\n\r]*')
_SEPARATOR = re.compile(r"[ \t\n\r]*([,\]}])[ \t\n\r]*")


class _Scan:
    """How far the members of one JSON container have been read."""

    __slots__ = ("count", "is_object", "members", "next", "pending")

    def __init__(self, members: dict[str, tuple[int, int]], next_: int, is_object: bool) -> None:
        # member (key, or index as a string) -> (offset of its key, offset of its value)
        self.members = members
        self.next = next_  # where the next member starts; -1 once the container is read
        self.pending = -1  # offset of the last recorded member's value, not yet skipped
        self.is_object = is_object
        self.count = 0


class _JsonLocator(_Locator):
    """Finds the line of a JSON pointer in the source text.

    ``parse`` decodes the document and indexes its top two levels on the way (a tool list's
    entries, or a listing's "tools"), so finding the tool a diagnostic is in costs nothing
    extra. Deeper containers are read lazily and only as far as the member looked for,
    skipping sibling values with the C decoder: reaching a key decodes the siblings before
    it, never the value under it. (A tokenizer indexing a whole tool in one Python-level pass
    measured slower, even for seven diagnostics per tool.)
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._decoder = json.JSONDecoder()
        self._scans: dict[int, _Scan] = {}  # container offset -> its members so far
        self._marks = [0]  # offsets whose line is known, ascending ...
        self._mark_lines = [1]  # ... and those lines

    def parse(self) -> Any:
        """The document's data, exactly as json.loads gives it (and with its errors)."""
        try:
            start = self._skip_ws(0)
            value, end = self._decode(start, 2)
            if self._skip_ws(end) == len(self._text):
                return value
        except (json.JSONDecodeError, IndexError):
            pass
        # Malformed (or an input the fast path declines): json.loads words the error, and
        # lines are then found by lazy reading alone.
        self._scans.clear()
        return json.loads(self._text)

    def line_of(self, pointer: str) -> int | None:
        try:
            offset = self._skip_ws(0)
            line_offset = offset
            for part in split_pointer(pointer):
                hit = self._member(offset, part)
                if hit is None:
                    break  # best effort: the line of the deepest container found
                line_offset, offset = hit
            return self._line(line_offset)
        except (ValueError, IndexError):
            return None

    def _member(self, offset: int, part: str) -> tuple[int, int] | None:
        scan = self._scans.get(offset)
        if scan is None:
            scan = self._open(offset)
        hit = scan.members.get(part)
        while hit is None and scan.next >= 0:
            self._advance(scan)
            hit = scan.members.get(part)
        return hit

    def _open(self, offset: int) -> _Scan:
        text = self._text
        opener = text[offset : offset + 1]
        scan = _Scan({}, -1, opener == "{")
        if opener == "{" and not _EMPTY_OBJECT.match(text, offset + 1):
            scan.next = offset + 1
        elif opener == "[" and not _EMPTY_ARRAY.match(text, offset + 1):
            scan.next = self._skip_ws(offset + 1)
        self._scans[offset] = scan
        return scan

    def _advance(self, scan: _Scan) -> None:
        """Record one more member of a container (or find that there are no more)."""
        text = self._text
        if scan.pending >= 0:
            _, end = self._decoder.raw_decode(text, scan.pending)
            scan.pending = -1
            sep = _SEPARATOR.match(text, end)
            if sep is None or sep.group(1) != ",":
                scan.next = -1
                return
            scan.next = sep.end()
        if not scan.is_object:
            scan.members[str(scan.count)] = (scan.next, scan.next)
            scan.count += 1
            scan.pending = scan.next
            return
        member = _MEMBER.match(text, scan.next)
        if member is None:
            scan.next = -1
            return
        raw = member.group(1)
        key = json.loads(f'"{raw}"') if "\\" in raw else raw
        scan.members[key] = (member.start(1) - 1, member.end())
        scan.pending = member.end()

    def _skip_ws(self, i: int) -> int:
        match = _WS.match(self._text, i)
        return match.end() if match else i

    def _decode(self, start: int, depth: int) -> tuple[Any, int]:
        """Decode the value at `start`, indexing containers `depth` levels down; (value, end).

        Scalars and deeper containers go to the C decoder; a member's key, colon and
        separators are each one regular-expression match.
        """
        text = self._text
        opener = text[start : start + 1]
        if depth <= 0 or opener not in ("[", "{"):
            return self._decoder.raw_decode(text, start)
        members: dict[str, tuple[int, int]] = {}
        self._scans[start] = _Scan(members, -1, opener == "{")
        if opener == "{":
            obj: dict[str, Any] = {}
            empty = _EMPTY_OBJECT.match(text, start + 1)
            if empty:
                return obj, empty.end()
            i = start + 1
            while True:
                member = _MEMBER.match(text, i)
                if member is None:
                    raise json.JSONDecodeError("Expecting property name", text, i)
                raw = member.group(1)
                key = json.loads(f'"{raw}"') if "\\" in raw else raw
                i = member.end()
                members[key] = (member.start(1) - 1, i)
                obj[key], i = self._decode(i, depth - 1)
                sep = _SEPARATOR.match(text, i)
                if sep is None or sep.group(1) == "]":
                    raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
                if sep.group(1) == "}":
                    return obj, sep.start(1) + 1
                i = sep.end()
        arr: list[Any] = []
        empty = _EMPTY_ARRAY.match(text, start + 1)
        if empty:
            return arr, empty.end()
        i = self._skip_ws(start + 1)
        while True:
            members[str(len(arr))] = (i, i)
            value, i = self._decode(i, depth - 1)
            arr.append(value)
            sep = _SEPARATOR.match(text, i)
            if sep is None or sep.group(1) == "}":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            if sep.group(1) == "]":
                return arr, sep.start(1) + 1
            i = sep.end()

    def _line(self, offset: int) -> int:
        # Lines counted from the nearest offset already resolved: diagnostics come roughly in
        # document order, so the whole file is counted about once, at C speed.
        at = bisect_right(self._marks, offset) - 1
        mark, line = self._marks[at], self._mark_lines[at]
        if mark != offset:
            line += self._text.count("\n", mark, offset)
            self._marks.insert(at + 1, offset)
            self._mark_lines.insert(at + 1, line)
        return line


class _TomlLocator(_Locator):
    """Lines of TOML table headers and keys, by path (array-of-tables entries by index).

    tomllib keeps no positions, so this scans the text for `[table]`, `[[array]]` and
    `key = value` lines; inline tables and multi-line arrays are not descended into.
    """

    _KEY = r"(?:[A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\"|'[^']*')"
    _DOTTED = re.compile(rf"\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*")
    _PART = re.compile(_KEY)

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, ...], int] = {}
        arrays: dict[tuple[str, ...], int] = {}  # array-of-tables path -> current index
        table: tuple[str, ...] = ()
        in_multiline: str | None = None
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if in_multiline:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            if not line or line.startswith("#"):
                continue
            if line.startswith("[["):
                keys = self._keys(line[2 : line.find("]]")])
                path = (*self._resolve(keys[:-1], arrays), *keys[-1:])
                arrays[path] = arrays.get(path, -1) + 1
                table = (*path, str(arrays[path]))
                self._lines.setdefault(table, lineno)
                continue
            if line.startswith("["):
                table = self._resolve(self._keys(line[1 : line.find("]")]), arrays)
                self._lines.setdefault(table, lineno)
                continue
            match = self._DOTTED.match(line)
            if match and line[match.end() : match.end() + 1] == "=":
                self._lines.setdefault((*table, *self._keys(match.group(1))), lineno)
                rest = line[match.end() + 1 :]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_multiline = quote

    def _keys(self, dotted: str) -> list[str]:
        out = []
        for part in self._PART.findall(dotted):
            if part[:1] == '"':
                part = json.loads(part)
            elif part[:1] == "'":
                part = part[1:-1]
            out.append(part)
        return out

    @staticmethod
    def _resolve(keys: list[str], arrays: dict[tuple[str, ...], int]) -> tuple[str, ...]:
        path: tuple[str, ...] = ()
        for key in keys:
            path = (*path, key)
            if path in arrays:  # a sub-table of the latest [[array]] entry
                path = (*path, str(arrays[path]))
        return path

    def line_of(self, pointer: str) -> int | None:
        parts = tuple(split_pointer(pointer))
        for n in range(len(parts), 0, -1):
            line = self._lines.get(parts[:n])
            if line is not None:
                return line
        return 1


@record
class SourceDocument:
    """One input: where it came from, its parsed data and (for line numbers) its text."""

    file: str
    data: Any
    text: str | None = None
    syntax: Literal["json", "toml"] | None = None
    _locator: _Locator | None = field(default=None, repr=False)

    def line_of(self, pointer: str) -> int | None:
        if self.text is None or self.syntax is None:
            return None
        if self._locator is None:
            self._locator = (
                _JsonLocator(self.text) if self.syntax == "json" else _TomlLocator(self.text)
            )
        return self._locator.line_of(pointer)


def read_source(path: str | Path, *, display: str | None = None) -> SourceDocument:
    """Read and parse one JSON or TOML file (TOML by a `.toml` suffix); ``-`` is stdin (JSON)."""

    from norma_cli.userfiles import UserFileError, read_text

    name = display or str(path)
    try:
        text = read_text(str(path), "schema file")
    except UserFileError as exc:
        raise LintInputError(f"{name}: {exc.reason}") from None
    if str(path).lower().endswith(".toml"):
        import tomllib

        try:
            with paused_gc():
                return SourceDocument(name, tomllib.loads(text), text, "toml")
        except tomllib.TOMLDecodeError as exc:
            raise LintInputError(f"{name}: invalid TOML: {exc}") from None
    locator = _JsonLocator(text)
    try:
        with paused_gc():
            return SourceDocument(name, locator.parse(), text, "json", locator)
    except json.JSONDecodeError as exc:
        raise LintInputError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise LintInputError(f"{name}: JSON nested too deeply") from None


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given; a directory stands for the *.json and *.toml files under it, sorted."""
    out: list[str] = []
    for raw in paths:
        p = Path(raw)
        if raw != "-" and p.is_dir():
            found = sorted(
                f for f in p.rglob("*") if f.suffix.lower() in (".json", ".toml") and f.is_file()
            )
            out.extend(str(f) for f in found)
        else:
            out.append(raw)
    return out


# --------------------------------------------------------------------------- tool extraction


@record(frozen=True)
class ToolDefinition:
    """One tool as found in a document. Fields keep whatever the file held, typed or not."""

    pointer: str  # pointer of the object holding name/description/schema
    name: Any = None
    description: Any = None
    schema_key: str | None = None  # which key held the input schema; None if none did
    input_schema: Any = None
    extra_schema_keys: tuple[str, ...] = ()
    strict: bool = False

    @property
    def label(self) -> str | None:
        return self.name if isinstance(self.name, str) and self.name else None


class Problem(NamedTuple):
    rule: str
    pointer: str
    tool: str | None
    message: str
    severity: Severity | None = None


_GEMINI_LISTS = ("functionDeclarations", "function_declarations")


def _tool_from(obj: dict[str, Any], pointer: str, strict: bool) -> ToolDefinition:
    keys = [k for k in SCHEMA_KEYS if k in obj]
    return ToolDefinition(
        pointer=pointer,
        name=obj.get("name"),
        description=obj.get("description"),
        schema_key=keys[0] if keys else None,
        input_schema=obj[keys[0]] if keys else None,
        extra_schema_keys=tuple(keys[1:]),
        strict=strict,
    )


def _looks_like_tool(obj: dict[str, Any]) -> bool:
    return (
        "name" in obj
        or any(k in obj for k in SCHEMA_KEYS)
        or (obj.get("type") == "function" and isinstance(obj.get("function"), dict))
    )


def extract_tools(data: Any) -> tuple[list[ToolDefinition], list[Problem]]:
    """Find the tool definitions in a parsed document (every shape SPEC §12 lists).

    Raises LintInputError when the document is none of those shapes.
    """
    entries: list[tuple[Any, str]]
    if isinstance(data, list):
        entries = [(item, f"/{i}") for i, item in enumerate(data)]
    elif isinstance(data, dict) and _looks_like_tool(data):
        entries = [(data, "")]
    elif isinstance(data, dict) and isinstance(data.get("tools"), list):
        entries = [(item, f"/tools/{i}") for i, item in enumerate(data["tools"])]
    elif isinstance(data, dict) and any(isinstance(data.get(k), list) for k in _GEMINI_LISTS):
        entries = [(data, "")]
    else:
        raise LintInputError(
            "no tool definitions found: expected a tool object (name, description, input_schema), "
            'a list of tools, {"tools": [...]}, or OpenAI {"type": "function", "function": {...}} '
            "entries"
        )
    tools: list[ToolDefinition] = []
    problems: list[Problem] = []
    for item, pointer in entries:
        _extract_entry(item, pointer, tools, problems)
    return tools, problems


def _extract_entry(
    item: Any, pointer: str, tools: list[ToolDefinition], problems: list[Problem]
) -> None:
    if not isinstance(item, dict):
        kind = type(item).__name__ if item is not None else "null"
        problems.append(Problem("T001", pointer, None, f"tool entry is a {kind}, not an object"))
        return
    if not _looks_like_tool(item):
        for key in _GEMINI_LISTS:  # a Gemini tool: {"functionDeclarations": [...]}
            if isinstance(item.get(key), list):
                for i, decl in enumerate(item[key]):
                    _extract_entry(decl, f"{pointer}/{key}/{i}", tools, problems)
                return
    function = item.get("function")
    if item.get("type") == "function" and isinstance(function, dict):
        # Chat Completions: strict is opt-in on the function object.
        tools.append(_tool_from(function, f"{pointer}/function", function.get("strict") is True))
        return
    if any(k in item for k in SCHEMA_KEYS) or item.get("type") in (None, "function", "custom"):
        # Responses API function tools are flat and strict unless "strict": false is given;
        # an Anthropic or MCP tool is strict only when it says so.
        flat_openai = item.get("type") == "function"
        strict = item.get("strict", flat_openai) is True
        tools.append(_tool_from(item, pointer, strict))
        return
    problems.append(
        Problem(
            "T003",
            pointer,
            item.get("name") if isinstance(item.get("name"), str) else None,
            f'skipped a "{item.get("type")}" tool: it has no input schema to lint',
        )
    )
