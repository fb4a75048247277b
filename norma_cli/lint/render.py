"""Output formats for a lint report: text, JSON, GitHub workflow commands, SARIF 2.1.0."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from norma_cli.lint.rules import RULES, LintReport


def render_text(report: LintReport) -> str:
    lines = []
    for d in report.diagnostics:
        where = f"{d.file}:{d.line}" if d.line is not None else d.file
        lines.append(
            f"{where}: {d.severity} {d.rule} {d.tool or '-'}: {d.message} [{d.pointer or '/'}]"
        )
    return "\n".join(lines) + ("\n" if lines else "")


def render_json(report: LintReport) -> str:
    doc = {
        "diagnostics": [d.as_dict() for d in report.diagnostics],
        "summary": {
            "files": report.files,
            "tools": report.tools,
            "errors": report.errors,
            "warnings": report.warnings,
        },
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: LintReport) -> str:
    """GitHub Actions workflow commands: each diagnostic becomes a file annotation."""
    lines = []
    for d in report.diagnostics:
        props = [f"file={_gh_property(d.file)}"]
        if d.line is not None:
            props.append(f"line={d.line}")
        props.append(f"title={_gh_property(f'{d.rule} {d.rule_name}')}")
        message = f"{d.tool or '-'}: {d.message} [{d.pointer or '/'}]"
        lines.append(f"::{d.severity} {','.join(props)}::{_gh_data(message)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _artifact_uri(file: str) -> str:
    from urllib.parse import quote

    path = Path(file)
    if path.is_absolute():
        return path.as_uri()
    return quote(path.as_posix())


def render_sarif(report: LintReport) -> str:
    """SARIF 2.1.0, one run, rules limited to those that produced results."""
    from norma_cli import __version__

    rule_ids = sorted({d.rule for d in report.diagnostics})
    index = {rule: i for i, rule in enumerate(rule_ids)}
    rules = [
        {
            "id": rule,
            "name": RULES[rule].name,
            "shortDescription": {"text": RULES[rule].summary},
            "defaultConfiguration": {"level": RULES[rule].severity},
        }
        for rule in rule_ids
    ]
    results = []
    for d in report.diagnostics:
        logical: dict[str, Any] = {"fullyQualifiedName": f"{d.file}#{d.pointer}", "kind": "object"}
        if d.tool:
            logical["name"] = d.tool
        location: dict[str, Any] = {"logicalLocations": [logical]}
        if not d.file.startswith("<"):
            physical: dict[str, Any] = {"artifactLocation": {"uri": _artifact_uri(d.file)}}
            if d.line is not None:
                physical["region"] = {"startLine": d.line}
            location["physicalLocation"] = physical
        results.append(
            {
                "ruleId": d.rule,
                "ruleIndex": index[d.rule],
                "level": d.severity,
                "message": {"text": f"{d.tool or '-'}: {d.message}"},
                "locations": [location],
                "properties": {"pointer": d.pointer, "tool": d.tool},
            }
        )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "norma",
                        "version": __version__,
                        "informationUri": "https://pypi.org/project/norma-cli/",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


RENDERERS: dict[str, Callable[[LintReport], str]] = {
    "text": render_text,
    "json": render_json,
    "github": render_github,
    "sarif": render_sarif,
}


def render(report: LintReport, fmt: str) -> str:
    return RENDERERS[fmt](report)
