"""Errors that end a command with a one-line message and a specific exit code."""

from __future__ import annotations


class NormaError(Exception):
    """A failure to report as one clear line; ``exit_code`` follows SPEC §12."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(NormaError):
    """Bad command-line usage or bad input to a command (exit 2)."""

    exit_code = 2


class ConfigError(NormaError):
    """A configuration file or value that cannot be used (exit 2), naming file, line and key."""

    exit_code = 2


class StoreError(NormaError):
    """The store cannot be opened or written."""

    exit_code = 1


class Interrupted(SystemExit):
    """SIGTERM/SIGHUP: leave through the normal close path, exiting 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(128 + signum)
        self.signal_name = signal.Signals(signum).name
