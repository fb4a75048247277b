"""Glob dialects: the shared translator reproduces a recording of the four old translators.

norma reads globs in four syntaxes (``norma_cli/core/globs.py``): the Glob tool's pattern,
gitignore lines (Grep's Python engine), permission-rule paths, and shell words. They were four
separate translators; ``tests/fixtures/glob_golden.json`` was written from those, before they
were merged, and holds for each of 2,618 patterns (hand-picked edge cases plus a seeded random
corpus) and each reading: a digest of the exact regex produced (or ``E``: rejected), its
flags, and which of 202 subjects it fully matches (a hex bit set). Every reading must stay
byte-identical, except the shell word, which may only widen (deny and ask rules use it).

Regenerate — only for a deliberate change of a dialect, and review the diff —
with ``.venv/bin/python tests/test_globs.py --regenerate``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import RunNorma

from norma_cli.core.globs import (
    BASH_WORD,
    GITIGNORE,
    GLOB_TOOL,
    RULE_PATH,
    SHELL_WORD,
    GlobDialect,
    glob_to_regex,
)

GOLDEN = Path(__file__).parent / "fixtures" / "glob_golden.json"
SEED = 20240611
RANDOM_PATTERNS = 3000

# What patterns are matched against: relative paths, names and shell words.
# fmt: off
SUBJECTS: list[str] = ["".join(t) for n in range(5) for t in itertools.product("ab/", repeat=n)] + [
    ".", "..", ".a", "a.b", "a/.b", ".a/b", "a.b.c", ".git/config", ".env", "a/b/.env", "src/a.py",
    "src/x/y.py", "src/a/b/c.py", "id_rsa", "home/u/.ssh/id_rsa", "]", "[", "!", "^", "-", "\\",
    "*", "?", "{", "}", ",", ":", "a,b", "{a,b}", "[a]", "[!a]", "a]", "a-", "b]", "!a", "^a",
    "a\\b", "a*b", "a?b", "a b", "a\nb", "a\\", "\\a", "(", ")", "+", "$", "|", "(a)", "a+", "a|b",
    "$a", "~", "~/a", "z", "A", "B", "Z", "é", "é/a", "a/é", "aé", "ü", "-rf", "-r", "-rf]", "rm",
    "/bin/rm", "r]", "r\\", "xyz", "a//b", "//a", "/", "a/b/", "/a/b", "ab/ab", "a.py", "b.txt",
    "a/b.py", "a/b/c/d/e",
]

# Hand-picked: every construct the four translators treat differently.
HAND: list[str] = [
    # stars and globstars
    "*", "**", "***", "****", "a*", "*a", "a**", "**a", "a**b", "a*b*", "*/*", "*/**", "**/",
    "**/*", "**/a", "a/**", "a/**/b", "a/**/", "/**", "/**/a", "**/**", "a/**/**/b", "a/***",
    "***/a", "a**/b", "a/b**", "**b/a", "a/*/b", "*/", "*.py", "**/*.py", "a/*.py",
    # trailing and leading slashes, dots, anchors
    "a/", "a//", "/a", "//a", "///a", "//", "/", "./", "./a", "./a/**", "./**", ".//a", "//a/**",
    "~", "~/", "~/a", "~/a/**", "~a", "~/**", ".", "..", "a/..", "../a", "a/./b", ".*", "*.", ".a",
    "a.b", "a/.b", ".git", ".git/**", "**/.env", "*.env", "id_rsa",
    # single characters
    "?", "??", "a?", "?/a", "a/?", "a?b",
    # escapes
    "\\*", "\\?", "\\[", "\\]", "\\{", "\\\\", "\\", "a\\", "\\a", "a\\/b", "\\/", "\\ ", "\\!a",
    "\\#a", "a\\*b", "\\**", "*\\*",
    # character classes
    "[a]", "[ab]", "[!a]", "[^a]", "[]]", "[]a]", "[!]]", "[^]]", "[!]a]", "[a-]", "[-a]", "[a-b]",
    "[z-a]", "[", "[a", "a[", "[!", "[!a", "]", "a]", "[]", "[!]", "[^]", "[\\]]", "[a\\]]",
    "[\\]a]", "[\\a]", "[a-\\]", "[[]", "[[a]", "[[:alpha:]]", "[[:digit:]]", "[a/b]", "[/]",
    "[!/]", "a[/]b", "a[!x]b", "**/a[!x]b", "[.]", "[*]", "[?]", "[{]", "[}]", "[,]", "[a^]",
    "[!!]", "[^^]", "[\\!a]", "[a-z]*", "*[0-9]", "-r[f]", "-r[f\\]]", "-r[[:alpha:]]", "r[!]]",
    "/bin/r?", "/bin/r*", "r[m]",
    # braces
    "{a,b}", "{a,b}/c", "{a,b/c}", "{a}", "{}", "{", "}", "{a", "a}", "{a,{b,c}}", "{a,b}{c,d}",
    "*.{py,txt}", "{,a}", "{a,}", "{\\,,a}", "{a\\}b,c}", "{[a],b}", "{**,a}", "{a/b,c}", "{!a,b}",
    # regex metacharacters
    "(", ")", "(a)", ".+", "a+", "^a", "a$", "$", "|", "a|b", "(?:a)", "a{2}", "\\d", "\\w*",
    "a.b", "+",
    # unicode and spaces
    "é", "é*", "*é", "[é]", "[!é]", "ü/**", "a b", " a", "a ", "a\\ ", "\t", "#a", "!a", "!",
    "!/a", "!a/",
]

RANDOM_ALPHABET = "aaaabbbbz/////****??[[[]]]!!^--{{}},,\\\\\\...~é(+$|: "  # weights by repetition


RANDOM_TOKENS = [
    "a", "a", "b", "b", "/", "/", "*", "*", "**", "**/", "/**", "?", ".", "[ab]", "[!a]", "[^b]",
    "[a-b]", "{a,b}", "{a,}", "\\*", "\\a", "[]]", "]", "[", "-", "é",
]
# fmt: on


def random_patterns(n: int = RANDOM_PATTERNS, seed: int = SEED) -> list[str]:
    """Half character soup (syntax edge cases), half token strings (patterns that match)."""
    rng = random.Random(seed)
    out: list[str] = []
    for k in range(n):
        if k % 2:
            length = rng.randint(1, 9)
            out.append("".join(rng.choice(RANDOM_ALPHABET) for _ in range(length)))
        else:
            length = rng.randint(1, 6)
            out.append("".join(rng.choice(RANDOM_TOKENS) for _ in range(length)))
    return out


def all_patterns() -> list[str]:
    return list(dict.fromkeys(HAND + random_patterns()))


# ----------------------------------------------------------------------------- recording
def _digest(regex: str) -> str:
    return hashlib.sha256(regex.encode()).hexdigest()[:12]


def _bits(regex: re.Pattern[str]) -> str:
    """Which subjects ``regex`` fully matches, as a hex number (bit i = SUBJECTS[i])."""
    value = 0
    for i, subject in enumerate(SUBJECTS):
        if regex.fullmatch(subject):
            value |= 1 << i
    return format(value, "x")


def _entry(regex: re.Pattern[str]) -> str:
    return f"{_digest(regex.pattern)}:{_bits(regex)}"


def _files(pattern: str) -> str:
    from norma_cli.tools.files import glob_regex

    return _entry(glob_regex(pattern))


def _gitignore_line(pattern: str) -> str:
    from norma_cli.tools.gitignore import parse_line

    rule = parse_line(pattern)
    if rule is None:
        return "N"
    return f"{'!' if rule.negated else ''}{'/' if rule.dir_only else ''}{_entry(rule.regex)}"


def _gitignore_glob(pattern: str) -> str:
    from norma_cli.tools.gitignore import glob_regex

    return _entry(re.compile(glob_regex(pattern), re.DOTALL))


def _gitignore_segment(pattern: str) -> str:
    from norma_cli.tools.gitignore import segment_regex

    return _entry(re.compile(segment_regex(pattern), re.DOTALL))


def _rule_path(pattern: str) -> str:
    from norma_cli.policy.paths import PathPattern

    p = PathPattern.parse(pattern)
    return f"{p.anchor[0]}{_entry(p.regex)}"


def _shell_word(pattern: str) -> str:
    # The reading shellwords.glob_regex has always made; it now also accepts what bash's own
    # bracket rules accept (test_shell_words_only_widen), so that part is recorded alone.
    return _entry(re.compile(glob_to_regex(pattern, SHELL_WORD), re.S))


RECORDERS: dict[str, Callable[[str], str]] = {
    "glob_tool": _files,
    "gitignore_line": _gitignore_line,
    "gitignore_glob": _gitignore_glob,
    "gitignore_segment": _gitignore_segment,
    "rule_path": _rule_path,
    "shell_word": _shell_word,
}


def record_one(dialect: str, pattern: str) -> str:
    """``digest:bits`` of the compiled regex (with dialect flags in front), or ``E``: rejected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible nested set" and friends
        try:
            return RECORDERS[dialect](pattern)
        except Exception:
            return "E"


def recording() -> dict[str, object]:
    patterns = all_patterns()
    return {
        "about": (
            "Golden recording of norma's glob dialects; see tests/test_globs.py. "
            "Regenerate: .venv/bin/python tests/test_globs.py --regenerate"
        ),
        "subjects": SUBJECTS,
        "patterns": patterns,
        "results": {d: [record_one(d, p) for p in patterns] for d in RECORDERS},
    }


def regenerate(path: Path = GOLDEN) -> None:
    data = recording()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- tests
def _golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("dialect", list(RECORDERS))
def test_every_reading_matches_the_recording(dialect: str) -> None:
    golden = _golden()
    assert golden["subjects"] == SUBJECTS and golden["patterns"] == all_patterns()
    wrong = [
        (pattern, want, got)
        for pattern, want in zip(golden["patterns"], golden["results"][dialect], strict=True)
        if (got := record_one(dialect, pattern)) != want
    ]
    assert not wrong, f"{len(wrong)} patterns read differently, first: {wrong[:10]}"


def test_recording_is_small_and_covers_matches() -> None:
    golden = _golden()
    assert GOLDEN.stat().st_size < 1_000_000
    for dialect, entries in golden["results"].items():
        matching = sum(1 for e in entries if ":" in e and not e.endswith(":0"))
        assert matching > 400, dialect  # the bit sets are not all empty


def test_shell_words_only_widen() -> None:
    """The regex deny rules use for a glob word matches all it did, and what bash would."""
    from norma_cli.policy.shellwords import glob_regex

    golden = _golden()
    gained = {}
    for pattern, want in zip(golden["patterns"], golden["results"]["shell_word"], strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                got = glob_regex(pattern)
            except re.error:
                assert want == "E", pattern  # still refused, the check still fails closed
                continue
        assert want != "E", pattern
        old = int(want.split(":")[1], 16)
        new = int(_bits(got), 16)
        assert old & ~new == 0, f"{pattern!r} lost matches"
        if glob_to_regex(pattern, BASH_WORD) == glob_to_regex(pattern, SHELL_WORD):
            assert _digest(got.pattern) == want.split(":")[0], pattern
        if new & ~old:
            gained[pattern] = [s for i, s in enumerate(SUBJECTS) if (new & ~old) >> i & 1]
    assert gained["-r[f\\]]"] == ["-rf"]
    assert gained["-r[[:alpha:]]"] == ["-rf"]
    assert gained["[a\\]]"] == ["a", "]"]
    assert set(gained) == {
        "[\\]]",
        "[a\\]]",
        "[\\]a]",
        "[[:alpha:]]",
        "[[:digit:]]",
        "-r[f\\]]",
        "-r[[:alpha:]]",
    }


# What the dialects' differences mean, spelled out (None: the pattern is refused).
DIFFERENCES: list[tuple[str, str, tuple[bool | None, bool | None, bool | None, bool | None]]] = [
    # pattern, subject, (GLOB_TOOL, GITIGNORE, RULE_PATH, SHELL_WORD)
    ("a*", "ab/c", (False, False, False, True)),  # '*' crosses '/' only in a shell word
    ("a?c", "a/c", (False, False, False, True)),
    ("a**b", "a/x/b", (False, False, True, True)),  # '**' inside a segment
    ("a/**/b", "a/b", (True, True, True, False)),  # '**/' is zero or more directories
    ("a/**/b", "a//b", (False, True, True, True)),  # ... empty directory names too
    ("a/**", "a", (False, False, True, False)),  # rule paths: the folder itself
    ("**", "a/b", (True, True, True, True)),
    ("\\*", "*", (False, True, True, True)),  # no escapes in the Glob tool
    ("\\*", "\\x", (True, False, False, False)),
    ("[!a]", "/", (True, False, False, True)),  # where a negated class may match '/'
    ("{a,b}", "b", (True, True, False, False)),  # braces (shell words expand them earlier)
    ("[]]", "]", (None, True, True, True)),
    ("[!]]", "x", (None, True, None, None)),
    ("[a-]", "-", (True, True, True, True)),
    ("[z-a]", "b", (None, None, None, None)),
    ("*", ".env", (True, True, True, True)),  # no dialect hides dotfiles
    ("a", "A", (False, False, False, False)),  # none folds case
]


@pytest.mark.parametrize(("pattern", "subject", "expected"), DIFFERENCES)
def test_dialect_differences(pattern: str, subject: str, expected: tuple[bool | None, ...]) -> None:
    dialects: tuple[GlobDialect, ...] = (GLOB_TOOL, GITIGNORE, RULE_PATH, SHELL_WORD)
    got: list[bool | None] = []
    for dialect in dialects:
        try:
            regex = re.compile(glob_to_regex(pattern, dialect), re.S)
        except re.error:
            got.append(None)
            continue
        got.append(regex.fullmatch(subject) is not None)
    assert tuple(got) == expected


def test_bash_brackets() -> None:
    def bash(pattern: str, subject: str) -> bool:
        return re.fullmatch(glob_to_regex(pattern, BASH_WORD), subject, re.S) is not None

    assert bash("[f\\]]", "]") and bash("[f\\]]", "f") and not bash("[f\\]]", "\\")
    assert bash("[!]]", "x") and not bash("[!]]", "]") and not bash("[!]]", "/")
    assert bash("[[:alpha:]]", "f") and not bash("[[:alpha:]]", "ff")
    assert not bash("[z-a]", "b") and not bash("[z-a]", "z")  # a reversed range: nothing
    assert bash("[!z-a]", "b")
    assert bash("[a-c-]", "-") and bash("[a-c-]", "b") and not bash("[a-c-]", "d")


POLICY = """[permissions]
allow = ["Bash(rm:*)"]
deny = ["Bash(rm -rf:*)"]
"""


def _decision(norma: RunNorma, cfg: Path, command: str) -> str:
    proc = norma(
        "--config",
        str(cfg),
        "policy",
        "check",
        "Bash",
        "-i",
        json.dumps({"command": command}),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["decision"]


def test_bracket_tricks_meet_the_deny_rule(norma: RunNorma, tmp_path: Path) -> None:
    """With a file named ``-rf`` present, bash runs ``rm -rf`` for each of these lines."""
    (tmp_path / "-rf").write_text("")
    expanded = subprocess.run(
        ["bash", "-c", "printf '%s\\n' -r[f] -r[f\\]] -r[[:alpha:]] -r[x]"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert expanded == ["-rf", "-rf", "-rf", "-r[x]"]
    cfg = tmp_path / "policy.toml"
    cfg.write_text(POLICY)
    assert _decision(norma, cfg, "rm -r[f] victim") == "deny"
    assert _decision(norma, cfg, "rm -r[f\\]] victim") == "deny"
    assert _decision(norma, cfg, "rm -r[[:alpha:]] victim") == "deny"
    assert _decision(norma, cfg, "rm -r[x] victim") == "allow"  # no wider than it must be
    assert _decision(norma, cfg, "rm -r victim") == "allow"


def test_bad_class_in_a_rule_path_is_a_config_error(norma: RunNorma, tmp_path: Path) -> None:
    cfg = tmp_path / "policy.toml"
    cfg.write_text('[permissions]\ndeny = ["Read(./[z-a]/**)"]\n')
    proc = norma("--config", str(cfg), "policy", "check", "Read", "-i", '{"file_path": "x"}')
    assert proc.returncode == 2
    assert "Read(./[z-a]/**)" in proc.stderr and "bad character range z-a" in proc.stderr
    assert "internal error" not in proc.stderr


def test_bad_class_in_a_glob_is_a_tool_error(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    proc = norma("run", "Glob", "-i", '{"pattern": "[z-a]*"}')
    assert proc.stdout.strip(), proc.stderr
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["is_error"]
    assert "invalid glob pattern '[z-a]*': bad character range z-a" in out["content"][0]["text"]
    ok = json.loads(norma("run", "Glob", "-i", '{"pattern": "[a-b]*"}').stdout)
    assert ok["content"][0]["text"] == str(tmp_path / "a.py")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--regenerate"]:
        regenerate(Path(sys.argv[2]) if len(sys.argv) > 2 else GOLDEN)
        print(f"wrote {sys.argv[2] if len(sys.argv) > 2 else GOLDEN}")
    else:
        print("usage: tests/test_globs.py --regenerate [PATH]", file=sys.stderr)
        sys.exit(2)
