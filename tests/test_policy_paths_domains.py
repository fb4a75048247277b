"""File-path, domain and parameter rules through the real ``PermissionEngine.evaluate``.

Real files and real symlinks in a temporary project (``policy_fixtures.make_workspace``):
``link`` → ``secrets``, ``etclink`` → ``/etc``, ``src/outlink`` → a folder outside the project,
``docs/seclink`` → ``secrets``; HOME points at a temporary home with ``.ssh/id_rsa``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from policy_fixtures import TOOLS, Workspace, make_workspace, named_tool

PATHS: list[tuple[str, dict[str, Any], str]] = [
    # Read(./secrets/**) under every spelling, and for every reading tool
    ("Read", {"file_path": "secrets/k"}, "deny"),
    ("Read", {"file_path": "./secrets/k"}, "deny"),
    ("Read", {"file_path": "{root}/secrets/k"}, "deny"),
    ("Read", {"file_path": "./src/../secrets/k"}, "deny"),
    ("Read", {"file_path": "src/outlink/../proj/secrets/k"}, "deny"),  # .. after a symlink
    ("Read", {"file_path": "{root}//secrets/./k"}, "deny"),
    ("Read", {"file_path": "link/k"}, "deny"),  # symlink into the denied folder
    ("Read", {"file_path": "docs/seclink/k"}, "deny"),  # ... even from an allowed one
    ("Read", {"file_path": "secrets"}, "deny"),  # the folder itself
    ("Grep", {"path": "secrets"}, "deny"),
    ("Grep", {"path": "link"}, "deny"),
    ("Glob", {"path": "./secrets"}, "deny"),
    ("LS", {"path": "secrets"}, "deny"),
    ("LS", {"path": "{root}/link"}, "deny"),
    ("Edit", {"file_path": "secrets/k"}, "ask"),  # Read rules do not govern edits
    # Read(~/.ssh/**) and Read(*.env)
    ("Read", {"file_path": "~/.ssh/id_rsa"}, "deny"),
    ("Read", {"file_path": "{home}/.ssh/id_rsa"}, "deny"),
    ("Read", {"file_path": "{home}/.ssh/../.ssh/id_rsa"}, "deny"),
    ("Read", {"file_path": "{home}/x/../.ssh"}, "deny"),
    ("Grep", {"path": "~/.ssh"}, "deny"),
    ("Read", {"file_path": ".env"}, "deny"),
    ("Read", {"file_path": "config/prod.env"}, "deny"),
    ("Read", {"file_path": "{home}/project.env"}, "deny"),
    ("Read", {"file_path": "config/prod.envelope"}, "allow"),
    # allows: rules, or read-only inside the roots, with every spelling covered
    ("Read", {"file_path": "docs/a.md"}, "allow"),
    ("Read", {"file_path": "src/a.py"}, "allow"),
    ("Grep", {}, "allow"),
    ("Glob", {"path": "src"}, "allow"),
    ("Read", {"file_path": "src/outlink/x"}, "ask"),  # resolves outside the roots
    ("Read", {"file_path": "{outside}/x"}, "ask"),
    ("Read", {"file_path": "/etc/hostname"}, "ask"),
    ("Read", {"file_path": "etclink/hostname"}, "ask"),
    # Edit(//etc/**) governs every writing tool, through symlinks and ..
    ("Edit", {"file_path": "/etc/passwd"}, "deny"),
    ("Write", {"file_path": "/etc/passwd"}, "deny"),
    ("MultiEdit", {"file_path": "/etc/hosts"}, "deny"),
    ("Write", {"file_path": "etclink/passwd"}, "deny"),
    ("Edit", {"file_path": "/etc/../etc/passwd"}, "deny"),
    ("Write", {"file_path": "/tmp/../etc/x"}, "deny"),
    ("Write", {"file_path": "/etc"}, "deny"),
    ("Write", {"file_path": "/etcetera/x"}, "ask"),
    ("Read", {"file_path": "/etc/passwd"}, "ask"),  # Edit rules do not govern reads
    # Edit(./src/**) allow, Edit(./package.json) ask, Write(./logs/**) allow
    ("Edit", {"file_path": "src/a.py"}, "allow"),
    ("Write", {"file_path": "src/new.py"}, "allow"),
    ("MultiEdit", {"file_path": "./src/a.py"}, "allow"),
    ("Edit", {"file_path": "src/../package.json"}, "ask"),
    ("Write", {"file_path": "package.json"}, "ask"),
    ("Edit", {"file_path": "src/outlink/x"}, "ask"),  # allowed spelling, outside resolution
    ("Write", {"file_path": "build/x"}, "allow"),  # Edit(./build/**) governs Write
    ("Write", {"file_path": "docs/x"}, "ask"),  # Read rules do not govern writes
    ("Write", {"file_path": "logs/a.log"}, "allow"),
    ("Edit", {"file_path": "logs/a.log"}, "ask"),  # Write rules do not govern Edit
    ("Write", {}, "ask"),
]

DOMAINS: list[tuple[str, str]] = [
    ("https://example.com/x", "allow"),
    ("https://EXAMPLE.com./x", "allow"),
    ("https://example.com:8443/", "allow"),
    ("https://user:pw@example.com/", "allow"),
    ("https://ex%61mple.com/", "allow"),
    ("https://\uff45xample.com/", "allow"),  # fullwidth e
    ("https://www.example.com", "ask"),  # example.com means that host only
    ("https://example.com.evil.net/", "ask"),
    ("https://other.net/?example.com", "ask"),
    ("https://other.net/example.com", "ask"),
    ("https://other.net#@example.com", "ask"),
    ("https://example.com@other.net/", "ask"),
    ("https://example.com%2eother.net/", "ask"),
    ("http://other.net\\@example.com/", "ask"),  # parsers disagree: never allowed
    ("http:example.com", "ask"),
    ("example.com/x", "ask"),
    ("ftp://example.com/", "ask"),
    ("", "ask"),
    ("https://docs.rs/", "ask"),  # *.docs.rs: subdomains only
    ("https://serde.docs.rs/", "allow"),
    ("https://a.b.docs.rs/x", "allow"),
    ("https://xdocs.rs/", "ask"),
    ("https://xn--bcher-kva.de/", "allow"),
    ("https://BÜCHER.de/", "allow"),
    ("https://evil.net/", "deny"),
    ("https://EVIL.NET./", "deny"),
    ("https://\uff45vil.net/", "deny"),
    ("https://evil.net:443/", "deny"),
    ("https://example.com@evil.net/", "deny"),
    ("http://evil.net\\@example.com/", "deny"),  # a browser goes to evil.net
    ("http://example.com\\@evil.net/", "deny"),  # httpx and urllib go to evil.net
    ("evil.net/x", "deny"),
    ("https://x.evil.org/", "deny"),
    ("https://evil.org/", "ask"),
    ("https://evil.org.example.com/", "ask"),
    ("http://127.0.0.1/", "deny"),
    ("http://127.1/", "deny"),
    ("http://0x7f.0.0.1/", "deny"),
    ("http://2130706433/", "deny"),
    ("http://0177.0.0.1/", "deny"),
    ("http://[::1]/", "ask"),
]

PARAMS: list[tuple[str, dict[str, Any], str]] = [
    ("mcp__git__git_status", {"repo_path": "/anything"}, "allow"),
    ("mcp__git__git_commit", {"repo_path": "/srv/app"}, "allow"),
    ("mcp__git__git_commit", {"repo_path": "/srv"}, "allow"),
    ("mcp__git__git_commit", {"repo_path": "/srv/../etc"}, "deny"),
    ("mcp__git__git_commit", {"repo_path": "/srv/../home"}, "ask"),
    ("mcp__git__git_commit", {"repo_path": "/srvx"}, "ask"),
    ("mcp__git__git_commit", {"repo_path": "etclink/x"}, "deny"),
    ("mcp__git__git_commit", {}, "ask"),
    ("mcp__git__git_commit", {"repo_path": ["/srv/a", "/srv/b"]}, "allow"),
    ("mcp__git__git_commit", {"repo_path": ["/srv/a", "/opt/b"]}, "ask"),
    ("mcp__git__git_commit", {"repo_path": {"nested": "/srv"}}, "ask"),
    ("mcp__git__git_log", {"repo_path": "/etc/x"}, "deny"),  # mcp__git__* deny
    ("mcp__db__query", {"sql": "SELECT 1"}, "ask"),
    ("mcp__db__query", {"sql": "DROP TABLE users"}, "deny"),
    ("mcp__db__query", {"sql": "x; DROP TABLE users"}, "deny"),
    ("mcp__db__query", {"sql": 42}, "ask"),
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    tmp = tmp_path_factory.mktemp("paths")
    with pytest.MonkeyPatch.context() as patcher:
        patcher.setenv("HOME", str(tmp / "home"))
        yield make_workspace(tmp)


def test_corpus_sizes() -> None:
    assert len(PATHS) + len(DOMAINS) + len(PARAMS) >= 100


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"), PATHS, ids=[f"{t}-{sorted(i.items())}" for t, i, _ in PATHS]
)
def test_paths(ws: Workspace, tool: str, tool_input: dict[str, Any], expected: str) -> None:
    d = ws.evaluate(TOOLS[tool], ws.fill(tool_input))
    assert d.behavior == expected, (d.stage, d.reason, d.rule)


@pytest.mark.parametrize(("url", "expected"), DOMAINS, ids=[repr(u) for u, _ in DOMAINS])
def test_domains(ws: Workspace, url: str, expected: str) -> None:
    d = ws.evaluate(TOOLS["WebFetch"], {"url": url})
    assert d.behavior == expected, (d.stage, d.reason, d.rule)


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"), PARAMS, ids=[f"{t}-{i}" for t, i, _ in PARAMS]
)
def test_params(ws: Workspace, tool: str, tool_input: dict[str, Any], expected: str) -> None:
    d = ws.evaluate(named_tool(tool), tool_input)
    assert d.behavior == expected, (d.stage, d.reason, d.rule)


def test_deny_names_the_family_rule_and_its_source(ws: Workspace) -> None:
    d = ws.evaluate(TOOLS["Grep"], {"path": "link"})
    assert (d.stage, d.rule and d.rule.text) == ("rule", "Read(./secrets/**)")
    assert d.rule is not None and d.rule.source.startswith("norma.toml:deny[")


def test_working_root_is_the_first_root_not_the_cwd(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    ws.ctx.cwd = ws.root / "src"
    assert ws.evaluate(TOOLS["Read"], {"file_path": "../secrets/k"}).behavior == "deny"
    assert ws.evaluate(TOOLS["Edit"], {"file_path": "a.py"}).behavior == "allow"


def test_a_symlink_made_after_the_rules_loaded_is_still_seen(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    assert ws.evaluate(TOOLS["Read"], {"file_path": "docs/late/k"}).behavior == "allow"
    (ws.root / "docs" / "late").symlink_to(ws.root / "secrets")
    assert ws.evaluate(TOOLS["Read"], {"file_path": "docs/late/k"}).behavior == "deny"
