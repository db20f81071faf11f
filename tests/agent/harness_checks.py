"""Checks that a harness episode left nothing behind, shared by the harness tests."""

from __future__ import annotations

import os
from pathlib import Path


def process_gone(pid: int) -> bool:
    """No live process has this pid (a zombie waiting for a reaper that is not ours counts as gone:
    it runs nothing and holds nothing but its exit status)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (e.g. an episode's capture session)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and not process_gone(int(entry)):
            found.append(int(entry))
    return found
