"""norma: run AI-agent tool calls behind a policy pipeline."""

__version__ = "0.1.0"
