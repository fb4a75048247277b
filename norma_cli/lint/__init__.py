"""`norma tools lint`: find what is wrong with tool definitions before a model or norma sees them.

A pure library: nothing here prints or exits (the command in ``norma_cli/cli/lint.py`` does).

* ``read_source`` turns a JSON or TOML file into a ``SourceDocument`` (sources.py);
* ``Linter.lint`` turns documents into ``Diagnostic``s: norma's own checks (linter.py) plus the
  provider profiles chosen (profiles.py, a data table);
* ``render`` prints a ``LintReport`` as text, JSON, GitHub workflow commands or SARIF (render.py).

Speed matters (SPEC §15: 10,000 schemas in under 3 s), so the meta-schema validator is compiled
once per ``Linter``, each schema is walked once, and line numbers are computed only for the
pointers that have a diagnostic.
"""

from norma_cli.lint.linter import Linter
from norma_cli.lint.profiles import PROFILES, Profile, ProfileCheck
from norma_cli.lint.render import RENDERERS, render
from norma_cli.lint.rules import RULES, Diagnostic, LintReport, RuleInfo, Severity
from norma_cli.lint.sources import (
    LintInputError,
    SourceDocument,
    ToolDefinition,
    expand_paths,
    extract_tools,
    read_source,
)

__all__ = [
    "PROFILES",
    "RENDERERS",
    "RULES",
    "Diagnostic",
    "LintInputError",
    "LintReport",
    "Linter",
    "Profile",
    "ProfileCheck",
    "RuleInfo",
    "Severity",
    "SourceDocument",
    "ToolDefinition",
    "expand_paths",
    "extract_tools",
    "read_source",
    "render",
]
