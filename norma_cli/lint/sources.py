"""Reading tool files: text to data, data to tool definitions, pointers back to lines."""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from norma_cli.errors import UsageError
from norma_cli.lint.rules import Severity
from norma_cli.lint.walk import split_pointer

SCHEMA_KEYS = ("input_schema", "inputSchema", "parameters", "parametersJsonSchema")


class LintInputError(UsageError):
    """A file that cannot be read or parsed, or that holds no recognisable tool definitions."""


class _Locator:
    """Maps a JSON pointer to a 1-based line in the source text (best effort; None if unknown)."""

    def line_of(self, pointer: str) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError


# The C string scanner behind json.loads; the stubs do not declare it.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class _JsonLocator(_Locator):
    """Walks the JSON text down a pointer, skipping sibling values with the C decoder.

    The members of each container it descends into are indexed once, so many diagnostics in one
    big file cost about one extra parse, not one per diagnostic.
    """

    _WS = re.compile(r"[ \t\n\r]*")

    def __init__(self, text: str) -> None:
        self._text = text
        self._decoder = json.JSONDecoder()
        self._members: dict[int, dict[str, tuple[int, int]]] = {}
        self._newlines: list[int] | None = None

    def line_of(self, pointer: str) -> int | None:
        try:
            offset = self._skip_ws(0)
            line_offset = offset
            for part in split_pointer(pointer):
                members = self._members.get(offset)
                if members is None:
                    members = self._index(offset)
                    self._members[offset] = members
                hit = members.get(part)
                if hit is None:
                    break  # best effort: the line of the deepest container found
                line_offset, offset = hit
            return self._line(line_offset)
        except (ValueError, IndexError):
            return None

    def _skip_ws(self, i: int) -> int:
        match = self._WS.match(self._text, i)
        return match.end() if match else i

    def _index(self, start: int) -> dict[str, tuple[int, int]]:
        """Members of the container at `start`: key (or index) -> (key offset, value offset)."""
        text = self._text
        out: dict[str, tuple[int, int]] = {}
        opener = text[start]
        if opener not in "[{":
            return out
        i = self._skip_ws(start + 1)
        if text[i] in "]}":
            return out
        index = 0
        while True:
            if opener == "{":
                key_at = i
                key, i = _scanstring(text, i + 1)
                i = self._skip_ws(i)
                i = self._skip_ws(i + 1)  # past ':'
                out[key] = (key_at, i)
            else:
                out[str(index)] = (i, i)
                index += 1
            _, i = self._decoder.raw_decode(text, i)
            i = self._skip_ws(i)
            if text[i] != ",":
                return out
            i = self._skip_ws(i + 1)

    def _line(self, offset: int) -> int:
        if self._newlines is None:
            self._newlines = [m.start() for m in re.finditer("\n", self._text)]
        return bisect_right(self._newlines, offset - 1) + 1


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
        return 1 if parts else None


@dataclass
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
    import sys

    name = display or str(path)
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise LintInputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise LintInputError(f"{name}: is a directory") from None
    except UnicodeDecodeError as exc:
        raise LintInputError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise LintInputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if str(path).lower().endswith(".toml"):
        import tomllib

        try:
            return SourceDocument(name, tomllib.loads(text), text, "toml")
        except tomllib.TOMLDecodeError as exc:
            raise LintInputError(f"{name}: invalid TOML: {exc}") from None
    try:
        return SourceDocument(name, json.loads(text), text, "json")
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


@dataclass(frozen=True)
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
