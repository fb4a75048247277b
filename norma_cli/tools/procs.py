"""Which live processes belong to a process group or session (Linux /proc).

Used to prove a command's processes are gone: Bash after a foreground command, background
tasks and PTY shells when they stop or their session closes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator


def live_processes() -> Iterator[tuple[int, int, int]]:
    """(pid, pgid, sid) of every live (non-zombie) process, from /proc/PID/stat."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # exited while we looked
        # fields after "(comm)": state ppid pgrp session ...; comm may itself contain ")"
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 3 and fields[0] not in (b"Z", b"X"):
            yield int(name), int(fields[2]), int(fields[3])


def group_members(pgid: int) -> list[int]:
    """Live pids in process group ``pgid``."""
    return [pid for pid, group, _ in live_processes() if group == pgid]


def group_or_session_members(leader: int) -> list[int]:
    """Live pids whose process group or session is led by ``leader``."""
    return [pid for pid, group, sid in live_processes() if leader in (group, sid)]
