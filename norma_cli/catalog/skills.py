"""Skills: folders holding a ``SKILL.md`` (front matter + instructions), and the ``Skill`` tool.

Sources, weakest first: plugins (``register_skills``), the user config dir
(``<user config dir>/skills/``), the project (``.norma/skills/``). A later source replaces an
earlier skill of the same name, except that an untrusted project never replaces a trusted one.

A skill adds instructions and unlocks; it never grants permission. Its ``allowed-tools`` names
deferred tools it gates (they start locked and unlock when the skill is invoked), and its
``mcps`` names MCP servers whose tools it gates the same way. A skill from an untrusted project
(its config not trusted with ``norma config trust``) is listed and readable, but its
``allowed-tools`` and ``mcps`` are ignored: it neither locks nor unlocks anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from norma_cli.core.contract import CallContext, Tool, ToolOutput
from norma_cli.core.record import field, record
from norma_cli.errors import ConfigError

SKILL_FILE = "SKILL.md"
SKILL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_SKILL_BYTES = 1_000_000


@record(frozen=True)
class Skill:
    name: str
    description: str
    instructions: str
    mcps: tuple[str, ...] = ()
    allowed_tools: tuple[str, ...] = ()
    origin: str = "user"  # project | user | plugin:NAME
    path: str | None = None
    trusted: bool = True

    @property
    def gates(self) -> tuple[str, ...]:
        """Tool names this skill gates (an untrusted skill gates nothing)."""
        return self.allowed_tools if self.trusted else ()

    @property
    def gated_servers(self) -> tuple[str, ...]:
        return self.mcps if self.trusted else ()


# ----------------------------------------------------------------------------- front matter
def parse_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """``---``-fenced ``key: value`` lines at the top of a file, and the body after them.

    A deliberately small YAML subset: scalars (quoted or plain), inline lists ``[a, b]``,
    block lists (``- item`` lines), and ``|``/``>`` block scalars. Enough for SKILL.md without
    a YAML dependency; anything else is a clear error naming the line.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        raise ConfigError(f"{where}:1: front matter starts with --- but never ends") from None
    data: dict[str, Any] = {}
    i = 1
    while i < end:
        raw = lines[i]
        if not raw.strip() or raw.lstrip().startswith("#"):
            i += 1
            continue
        m = re.match(r"^([A-Za-z0-9_-]+)\s*:\s*(.*)$", raw)
        if not m or raw[0].isspace():
            raise ConfigError(f"{where}:{i + 1}: expected 'key: value' in the front matter")
        key, value = m.group(1), m.group(2).strip()
        i += 1
        if value in ("|", ">", "|-", ">-"):
            block: list[str] = []
            while i < end and (not lines[i].strip() or lines[i][0].isspace()):
                block.append(lines[i].strip())
                i += 1
            data[key] = ("\n" if value.startswith("|") else " ").join(block).strip()
        elif value == "":
            items: list[str] = []
            while i < end and re.match(r"^\s+-\s*", lines[i]):
                items.append(_scalar(re.sub(r"^\s+-\s*", "", lines[i])))
                i += 1
            data[key] = items if items else ""
        elif value.startswith("["):
            if not value.endswith("]"):
                raise ConfigError(f"{where}:{i}: an inline list must end with ]")
            inner = value[1:-1].strip()
            data[key] = [_scalar(v) for v in inner.split(",")] if inner else []
        else:
            data[key] = _scalar(value)
    body = "\n".join(lines[end + 1 :]).strip("\n")
    return data, body


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return re.sub(r"\s+#.*$", "", text)


def _names(value: Any, where: str, key: str) -> tuple[str, ...]:
    """A list field, also accepting ``Read, Grep`` or ``Read Grep`` as one string."""
    if value in (None, ""):
        return ()
    if isinstance(value, str):
        value = re.split(r"[,\s]+", value)
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {key} must be a list")
    return tuple(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))


def skill_from_text(
    text: str, *, where: str, default_name: str, origin: str, trusted: bool, path: str | None = None
) -> Skill:
    meta, body = parse_front_matter(text, where)
    name = str(meta.get("name") or default_name).strip()
    if not SKILL_NAME_RE.match(name):
        raise ConfigError(f"{where}: invalid skill name {name!r}")
    return Skill(
        name=name,
        description=str(meta.get("description") or "").strip(),
        instructions=body.strip(),
        mcps=_names(meta.get("mcps"), where, "mcps"),
        allowed_tools=_names(
            meta.get("allowed-tools", meta.get("allowed_tools")), where, "allowed-tools"
        ),
        origin=origin,
        path=path,
        trusted=trusted,
    )


def read_skill(folder: Path, origin: str, trusted: bool) -> Skill:
    file = folder / SKILL_FILE if folder.is_dir() else folder
    try:
        raw = file.read_bytes()[:MAX_SKILL_BYTES]
        text = raw.decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read skill: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: skill is not UTF-8 text") from None
    default = file.parent.name if file.name == SKILL_FILE else file.stem
    return skill_from_text(
        text, where=str(file), default_name=default, origin=origin, trusted=trusted, path=str(file)
    )


def skills_in(folder: Path, origin: str, trusted: bool) -> list[Skill]:
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    return [read_skill(e, origin, trusted) for e in entries if (e / SKILL_FILE).is_file()]


# ----------------------------------------------------------------------------- discovery
@record
class SkillSet:
    """All known skills by name, and the notes discovery made (shadowing, trust)."""

    skills: dict[str, Skill] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, skill: Skill) -> None:
        old = self.skills.get(skill.name)
        if old is not None and old.trusted and not skill.trusted:
            self.notes.append(
                f"skill {skill.name!r} from untrusted {skill.path or skill.origin} does not replace the"
                f" trusted one from {old.path or old.origin}"
            )
            return
        self.skills[skill.name] = skill


def project_skills_dir(cwd: Path, project_config: Path | None) -> Path | None:
    if project_config is not None:
        return project_config.parent / "skills"
    for folder in (cwd, *cwd.parents):
        candidate = folder / ".norma" / "skills"
        if candidate.is_dir():
            return candidate
    return None


def discover(
    *,
    cwd: Path,
    user_dir: Path,
    project_config: Path | None,
    project_trusted: bool,
    plugin_skills: Iterable[Skill] = (),
) -> SkillSet:
    found = SkillSet()
    for skill in plugin_skills:
        found.add(skill)
    for skill in skills_in(user_dir, "user", True):
        found.add(skill)
    project = project_skills_dir(cwd, project_config)
    if project is not None:
        for skill in skills_in(project, "project", project_trusted):
            found.add(skill)
    return found


def plugin_register(plugin: str, into: list[Skill]) -> Callable[..., None]:
    """The ``register`` callback handed to a plugin's ``register_skills``."""

    def register(
        source: Any = None,
        *,
        name: str | None = None,
        description: str = "",
        instructions: str = "",
        mcps: Iterable[str] = (),
        allowed_tools: Iterable[str] = (),
    ) -> None:
        origin = f"plugin:{plugin}"
        if source is not None:
            into.append(read_skill(Path(source), origin, True))
            return
        if not name or not SKILL_NAME_RE.match(name):
            raise ConfigError(
                f"plugin {plugin!r}: register_skills needs a folder or a valid name, got {name!r}"
            )
        into.append(
            Skill(
                name,
                description,
                instructions,
                tuple(mcps),
                tuple(allowed_tools),
                origin,
                None,
                True,
            )
        )

    return register


# ----------------------------------------------------------------------------- the tool
class SkillTool(Tool):
    """``Skill {name}``: the skill's instructions, and the tools it unlocks for this session."""

    name = "Skill"
    read_only = True  # returns text and widens nothing the rules decide
    concurrency_safe = False  # it changes the session's unlock set
    requires_approval = False

    def __init__(self, skills: dict[str, Skill], unlock: Callable[[Skill], list[str]]) -> None:
        self.skills = skills
        self._unlock = unlock
        listing = "\n".join(f"- {s.name}: {s.description}" for s in skills.values())
        self.description = (
            "Load a skill: its instructions for a task, and any extra tools it unlocks for the rest "
            "of this session. Skills available:\n" + listing
        )
        self.input_schema = {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "enum": sorted(skills),
                    "description": "The skill to load.",
                }
            },
            "required": ["name"],
            "additionalProperties": False,
        }

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> ToolOutput:
        skill = self.skills[tool_input["name"]]
        unlocked = self._unlock(skill)
        parts = [f"# Skill: {skill.name}", skill.instructions or "(this skill has no instructions)"]
        if unlocked:
            parts.append(
                "Unlocked for this session: "
                + ", ".join(unlocked)
                + ". Find their schemas with SearchExtraTools and call them with ExecuteExtraTool."
            )
        if not skill.trusted and (skill.allowed_tools or skill.mcps):
            parts.append(
                "(this skill comes from an untrusted project: its allowed-tools and mcps were ignored)"
            )
        return ToolOutput.text("\n\n".join(parts), skill=skill.name, unlocked=unlocked)
