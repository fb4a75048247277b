"""Layered TOML configuration (SPEC §13).

Layers, weakest first: built-in defaults < system < user < project (``.norma/config.toml``,
searched upward from the working directory) < ``--config``/``NORMA_CONFIG`` < CLI flags.
Tables merge key by key; rule lists, hooks and long-form rules accumulate across layers.

A project config is *untrusted* until ``norma config trust`` records its digest. Untrusted, it
may only tighten policy (deny and ask rules, a stricter mode); everything else it sets is
ignored, and norma says so on stderr. Editing the file revokes the trust.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from norma_cli.core.modes import MODE_STRICTNESS
from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError
from norma_cli.userfiles import file_kind

PROJECT_FILE = Path(".norma") / "config.toml"
ACCUMULATE = {
    ("permissions", "allow"),
    ("permissions", "ask"),
    ("permissions", "deny"),
    ("permissions", "rules"),
}


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var, "").strip()
    return Path(value if value else os.path.expanduser(default))


# On Linux the XDG rules are three lines; platformdirs (tens of ms to import) serves the rest.
_LINUX = sys.platform.startswith("linux")


def data_dir() -> Path:
    env = os.environ.get("NORMA_HOME")
    if env:
        return Path(env).expanduser()
    if _LINUX:
        return _xdg("XDG_DATA_HOME", "~/.local/share") / "norma"
    import platformdirs

    return Path(platformdirs.user_data_dir("norma", appauthor=False))


def user_config_path() -> Path:
    if _LINUX:
        return _xdg("XDG_CONFIG_HOME", "~/.config") / "norma" / "config.toml"
    import platformdirs

    return Path(platformdirs.user_config_dir("norma", appauthor=False)) / "config.toml"


def system_config_path() -> Path:
    if _LINUX:
        first = (os.environ.get("XDG_CONFIG_DIRS", "").strip() or "/etc/xdg").split(":")[0]
        return Path(first) / "norma" / "config.toml"
    import platformdirs

    return Path(platformdirs.site_config_dir("norma", appauthor=False)) / "config.toml"


@record
class Layer:
    """One configuration file (or the CLI flags), with what is needed to cite its lines."""

    kind: str  # system | user | project | explicit | cli
    path: Path | None
    data: dict[str, Any]
    text: str = ""
    trusted: bool = True
    digest: str = ""
    ignored: list[str] = field(default_factory=list)
    # What this layer actually contributes (an untrusted layer loses what would loosen policy).
    effective: dict[str, Any] = field(default_factory=dict)
    # Built on first use: every rule asks for its line, so the text is scanned once per layer.
    _lines: LineIndex | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def label(self) -> str:
        return str(self.path) if self.path else "command line"

    @property
    def lines(self) -> LineIndex:
        if self._lines is None:
            self._lines = LineIndex(self.text)
        return self._lines

    def line_of(self, keypath: str) -> int | None:
        return self.lines.line_of(keypath) if self.text else None

    def source_of(self, keypath: str, needle: str | None = None) -> str:
        """``file:line`` for a key, or for a string inside that key's value."""
        if self.path is None:
            return "command line"
        line = self.line_of(keypath)
        if needle is not None and line is not None:
            found = self.lines.string_after(line, needle)
            line = found or line
        return f"{self.path}:{line}" if line else str(self.path)


@record
class Config:
    """The merged configuration plus the layers it came from."""

    layers: list[Layer]
    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def get(self, section: str, key: str, default: Any = None) -> Any:
        return (self.data.get(section) or {}).get(key, default)


def read_layer(kind: str, path: Path) -> Layer:
    """One config file, parsed and checked against the schema (ConfigError if it is not)."""
    import tomllib

    raw = _read_regular(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: config is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", message)
        if m:
            line = int(m.group(1))
        else:  # "at end of document"
            line = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
        raise ConfigError(f"{path}:{line}: invalid TOML: {message}") from None
    layer = Layer(kind, path, data, text, digest=hashlib.sha256(raw).hexdigest())
    from norma_cli import config_schema

    config_schema.validate(data, str(path), layer.line_of)
    return layer


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file; anything else (a directory, a FIFO, a device) is refused
    by what it is, and is never read: ``/dev/zero`` would never end, a FIFO would block."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: config file is a directory") from None
    except OSError as exc:  # EACCES, ELOOP, ENXIO (a socket), ...
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind:
            what = kind if kind == "a directory" else f"not a regular file ({kind})"
            raise ConfigError(f"{path}: config file is {what}")
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            return handle.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def _exists(path: Path) -> bool:
    """Whether something is at ``path`` (a dangling symlink is nothing). A path that cannot
    be checked is an error: a config that may be there must not be skipped silently."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot check for a config file: {exc.strerror or exc}"
        ) from None
    return True


def find_project_config(start: Path) -> Path | None:
    """The nearest ``.norma/config.toml`` from ``start`` upward. What stands there is returned
    even when it is not a regular file (reading it then says what it is): searching past it
    would apply a parent's config instead of the one the project meant to have."""
    for folder in (start, *start.parents):
        candidate = folder / PROJECT_FILE
        try:
            os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # a folder we may not search (EACCES) or a symlink loop
            raise ConfigError(
                f"{folder}: cannot search for {PROJECT_FILE}: {exc.strerror or exc}"
            ) from None
        return candidate
    return None


def trust_file() -> Path:
    return data_dir() / "trusted-configs.json"


def trusted_digests() -> dict[str, str]:
    try:
        data = json.loads(trust_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_trust(path: Path, digest: str) -> None:
    digests = trusted_digests()
    digests[str(path.resolve())] = digest
    target = trust_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(digests, indent=2, sort_keys=True))
    os.replace(tmp, target)


def load(cwd: Path, explicit: Path | None = None, cli: dict[str, Any] | None = None) -> Config:
    layers: list[Layer] = []
    for kind, path in (("system", system_config_path()), ("user", user_config_path())):
        if _exists(path):
            layers.append(read_layer(kind, path))
    project = find_project_config(cwd)
    if project is not None:
        layer = read_layer("project", project)
        layer.trusted = trusted_digests().get(str(project.resolve())) == layer.digest
        layers.append(layer)
    env_path = os.environ.get("NORMA_CONFIG")
    for extra in (Path(env_path) if env_path else None, explicit):
        if extra is not None:
            layers.append(read_layer("explicit", extra))  # says what is wrong if not a file
    if cli:
        layers.append(Layer("cli", None, cli))

    merged: dict[str, Any] = {}
    warnings: list[str] = []
    for layer in layers:
        data = layer.data
        if not layer.trusted:
            data = _tighten_only(layer, merged)
            if layer.ignored:
                warnings.append(
                    f"{layer.path}: untrusted project config; ignored {', '.join(layer.ignored)} "
                    "(run `norma config trust` to apply it)"
                )
        layer.effective = data
        _merge(merged, data, ())
    return Config(layers, merged, warnings)


def _tighten_only(layer: Layer, merged: dict[str, Any]) -> dict[str, Any]:
    """What an untrusted layer may contribute: deny/ask rules and a stricter mode."""
    kept: dict[str, Any] = {}
    for section, values in layer.data.items():
        if section != "permissions" or not isinstance(values, dict):
            layer.ignored.append(f"[{section}]")
            continue
        perms: dict[str, Any] = {}
        for key, value in values.items():
            if key in ("deny", "ask"):
                perms[key] = value
            elif key == "rules":
                strict = [r for r in value if r.get("decision") in ("deny", "ask")]
                if len(strict) != len(value):
                    layer.ignored.append("permissions.rules with decision = allow")
                perms[key] = strict
            elif key == "mode":
                current = (merged.get("permissions") or {}).get("mode", "default")
                if MODE_STRICTNESS[value] >= MODE_STRICTNESS.get(current, 3):
                    perms[key] = value
                else:
                    layer.ignored.append(f"permissions.mode = {value!r} (looser than {current!r})")
            else:
                layer.ignored.append(f"permissions.{key}")
        kept["permissions"] = perms
    return kept


def _merge(into: dict[str, Any], data: dict[str, Any], path: tuple[str, ...]) -> None:
    for key, value in data.items():
        here = (*path, key)
        if here in ACCUMULATE or (len(here) == 2 and here[0] == "hooks"):
            into.setdefault(key, [])
            into[key] = [*into[key], *value]
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, here)
        elif isinstance(value, dict):
            into[key] = {}
            _merge(into[key], value, here)
        else:
            into[key] = value


# ----------------------------------------------------------------------------- line lookup
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\"'-]+?)\s*=")
_KEYPATH = re.compile(r"[^.\[\]]+|\[\d+\]")
# A basic string (with its escapes) or a literal string, on one line.
_STRING = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'")


def _split_key(text: str) -> list[str]:
    return [part.strip().strip("\"'") for part in text.split(".")]


class LineIndex:
    """Where keys and strings are written in one TOML text, from a single scan of it.

    Best effort, by line: the table headers and ``key =`` lines give each key path the first
    line that spells it; the string literals give each string value the lines it is on.
    """

    def __init__(self, text: str) -> None:
        # key path (``("hooks", "PreToolUse", "[0]", "matcher")``) -> first line spelling it
        self.keys: dict[tuple[str, ...], int] = {}
        self.strings: dict[str, list[int]] = {}  # string value -> its lines, ascending
        self.headers: list[int] = []  # lines of table headers, ascending
        table: list[str] = []
        array_counts: dict[tuple[str, ...], int] = {}
        for number, line in enumerate(text.splitlines(), 1):
            header = _HEADER.match(line)
            if header:
                self.headers.append(number)
                names = _split_key(header.group(2))
                if header.group(1) == "[[":
                    key = tuple(names)
                    index = array_counts.get(key, -1) + 1
                    array_counts[key] = index
                    table = [*names, f"[{index}]"]
                else:
                    table = names
                self.keys.setdefault(tuple(table), number)
                continue
            key_match = _KEY.match(line)
            if key_match:
                self.keys.setdefault((*table, *_split_key(key_match.group(1))), number)
            if "'" in line or '"' in line:
                for literal in _STRING.findall(line):
                    lines = self.strings.setdefault(_string_value(literal), [])
                    if not lines or lines[-1] != number:
                        lines.append(number)

    def line_of(self, keypath: str) -> int | None:
        """The line of ``keypath`` (``a.b[2].c``), or of its longest written prefix."""
        target = tuple(_KEYPATH.findall(keypath))
        for size in range(len(target), 0, -1):
            line = self.keys.get(target[:size])
            if line is not None:
                return line
        return None

    def string_after(self, line: int, needle: str) -> int | None:
        """The first line from ``line`` on, before the next table header, holding the string
        ``needle`` (a rule inside the array that starts at ``line``)."""
        lines = self.strings.get(needle)
        if not lines:
            return None
        at = bisect.bisect_left(lines, line)
        if at == len(lines):
            return None
        found = lines[at]
        next_header = bisect.bisect_right(self.headers, line)
        if next_header < len(self.headers) and self.headers[next_header] < found:
            return None
        return found


def _string_value(literal: str) -> str:
    if literal.startswith("'") or "\\" not in literal:
        return literal[1:-1]
    try:  # TOML's basic-string escapes are JSON's, plus a few rare ones
        value = json.loads(literal)
    except ValueError:
        return literal[1:-1]
    return value if isinstance(value, str) else literal[1:-1]


def locate_line(text: str, keypath: str) -> int | None:
    """Best-effort 1-based line where ``keypath`` (``a.b[2].c``) is written in ``text``."""
    return LineIndex(text).line_of(keypath)
