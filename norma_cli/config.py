"""Layered TOML configuration (SPEC §13).

Layers, weakest first: built-in defaults < system < user < project (``.norma/config.toml``,
searched upward from the working directory) < ``--config``/``NORMA_CONFIG`` < CLI flags.
Tables merge key by key; rule lists, hooks and long-form rules accumulate across layers.

A project config is *untrusted* until ``norma config trust`` records its digest. Untrusted, it
may only tighten policy (deny and ask rules, a stricter mode); everything else it sets is
ignored, and norma says so on stderr. Editing the file revokes the trust.
"""

from __future__ import annotations

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

    @property
    def label(self) -> str:
        return str(self.path) if self.path else "command line"

    def line_of(self, keypath: str) -> int | None:
        return locate_line(self.text, keypath) if self.text else None

    def source_of(self, keypath: str, needle: str | None = None) -> str:
        """``file:line`` for a key, or for a string inside that key's value."""
        if self.path is None:
            return "command line"
        line = self.line_of(keypath)
        if needle is not None and line is not None:
            found = _find_string_after(self.text, line, needle)
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


def _read_layer(kind: str, path: Path) -> Layer:
    import tomllib

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
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


def find_project_config(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
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
        if path.is_file():
            layers.append(_read_layer(kind, path))
    project = find_project_config(cwd)
    if project is not None:
        layer = _read_layer("project", project)
        layer.trusted = trusted_digests().get(str(project.resolve())) == layer.digest
        layers.append(layer)
    env_path = os.environ.get("NORMA_CONFIG")
    for extra in (Path(env_path) if env_path else None, explicit):
        if extra is not None:
            if not extra.is_file():
                raise ConfigError(f"{extra}: config file not found")
            layers.append(_read_layer("explicit", extra))
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


def _split_key(text: str) -> list[str]:
    return [part.strip().strip("\"'") for part in text.split(".")]


def locate_line(text: str, keypath: str) -> int | None:
    """Best-effort 1-based line where ``keypath`` (``a.b[2].c``) is written in ``text``."""
    target = re.findall(r"[^.\[\]]+|\[\d+\]", keypath)
    table: list[str] = []
    array_counts: dict[tuple[str, ...], int] = {}
    best: int | None = None
    best_len = -1
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            names = _split_key(header.group(2))
            if header.group(1) == "[[":
                key = tuple(names)
                index = array_counts.get(key, -1) + 1
                array_counts[key] = index
                table = [*names[:-1], names[-1], f"[{index}]"]
            else:
                table = names
            score = _prefix_len(table, target)
            if score > best_len:
                best, best_len = number, score
            continue
        key_match = _KEY.match(line)
        if key_match:
            score = _prefix_len([*table, *_split_key(key_match.group(1))], target)
            if score > best_len:
                best, best_len = number, score
    return best if best_len > 0 else None


def _prefix_len(have: list[str], want: list[str]) -> int:
    """len(have) when ``have`` is a prefix of ``want``, else 0."""
    return len(have) if have == want[: len(have)] else 0


def _find_string_after(text: str, line: int, needle: str) -> int | None:
    lines = text.splitlines()
    quoted = (json.dumps(needle), f"'{needle}'")
    for i in range(line - 1, min(len(lines), line + 500)):
        if any(q in lines[i] for q in quoted):
            return i + 1
    return None
