"""norma: run AI-agent tool calls behind a policy pipeline."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Lazy public API, so `import norma_cli` (and `norma --help`) stays light.
    if name == "hookimpl":
        from norma_cli.hookspecs import hookimpl

        return hookimpl
    if name in ("Tool", "ToolOutput", "ContentBlock", "Decision", "CallContext"):
        from norma_cli.core import contract

        return getattr(contract, name)
    raise AttributeError(name)
