"""The composition root: the one place that wires a model client, environment runtimes and an
agent together (rollgate.stack.parts), and the role apps built from them: the embedded shape
(role all) and the agent role. Nothing below this layer builds an Agent."""

from rollgate.stack.parts import Stack, local_stack, remote_stack

__all__ = ["Stack", "local_stack", "remote_stack"]
