"""The lint vocabulary: rule ids, diagnostics, and the report they add up to."""

from __future__ import annotations

from typing import Any, Literal

from norma_cli.core.record import record

Severity = Literal["error", "warning"]


@record(frozen=True)
class RuleInfo:
    id: str
    name: str
    severity: Severity
    summary: str


RULES: dict[str, RuleInfo] = {
    r.id: r
    for r in (
        RuleInfo("T001", "entry-not-object", "error", "A tool entry must be a JSON object."),
        RuleInfo(
            "T002",
            "ambiguous-schema-key",
            "warning",
            "More than one of input_schema, inputSchema and parameters is present; "
            "the first is used.",
        ),
        RuleInfo(
            "T003",
            "not-a-function-tool",
            "warning",
            "A provider built-in tool entry (no input schema) was skipped.",
        ),
        RuleInfo("N001", "name-pattern", "error", "Tool names must match ^[A-Za-z0-9_-]{1,64}$."),
        RuleInfo(
            "N002",
            "duplicate-name",
            "error",
            "Two tool definitions share a name; registering both would replace the first.",
        ),
        RuleInfo("D001", "missing-description", "error", "A tool needs a non-empty description."),
        RuleInfo(
            "D002",
            "param-missing-description",
            "warning",
            "A parameter has no description, so the model must guess what it means.",
        ),
        RuleInfo(
            "S001",
            "schema-invalid-metaschema",
            "error",
            "The input schema is not a valid JSON Schema (draft 2020-12).",
        ),
        RuleInfo(
            "S002",
            "root-not-object",
            "error",
            'The input schema root must be a schema with "type": "object".',
        ),
        RuleInfo("S003", "schema-missing", "error", "The tool has no input schema."),
        RuleInfo(
            "S004",
            "schema-uncompilable",
            "error",
            "The schema cannot be compiled (bad regular expression or unresolvable $ref).",
        ),
        RuleInfo(
            "S005",
            "schema-dialect",
            "warning",
            "The schema declares a $schema other than draft 2020-12, which norma "
            "validates against.",
        ),
        RuleInfo(
            "S006",
            "required-not-declared",
            "error",
            "A required property is missing from the properties of a closed object, so no "
            "input can be valid.",
        ),
        RuleInfo(
            "V001",
            "default-invalid",
            "error",
            "A default value does not validate against its own schema.",
        ),
        RuleInfo(
            "V002",
            "example-invalid",
            "error",
            "An example value does not validate against its own schema.",
        ),
    )
}


@record(frozen=True)
class Diagnostic:
    file: str
    pointer: str  # RFC 6901 pointer into the file's document ("" is the whole document)
    line: int | None
    tool: str | None
    rule: str
    severity: Severity
    message: str

    @property
    def rule_name(self) -> str:
        return RULES[self.rule].name

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "pointer": self.pointer,
            "tool": self.tool,
            "rule": self.rule,
            "name": self.rule_name,
            "severity": self.severity,
            "message": self.message,
        }


@record(frozen=True)
class LintReport:
    diagnostics: list[Diagnostic]
    files: int
    tools: int

    @property
    def errors(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity == "warning")

    def summary(self) -> str:
        def n(count: int, word: str) -> str:
            return f"{count} {word}{'' if count == 1 else 's'}"

        scope = f"{n(self.tools, 'tool')} ({n(self.files, 'file')})"
        if not self.diagnostics:
            return f"no problems in {scope}"
        return f"{n(self.errors, 'error')}, {n(self.warnings, 'warning')} in {scope}"
