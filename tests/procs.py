"""Real server processes for tests (rollgate.core.processes, shared with the benchmarks)."""

from rollgate.core.processes import ServerProcess, rollgate_cmd

__all__ = ["ServerProcess", "rollgate_cmd"]
