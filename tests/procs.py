"""Real server processes for tests (devtools.processes, shared with the benchmarks)."""

from devtools.processes import ServerProcess, rollgate_cmd

__all__ = ["ServerProcess", "rollgate_cmd"]
