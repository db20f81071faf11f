"""What runs inside mini-swe-agent's own process (docs/agents.md, "mini-swe-agent in the sandbox").

This folder goes on the harness's PYTHONPATH and holds one module, `rollgate_mini_env`: it must
import nothing of Rollgate (mini-swe-agent lives in a virtual environment of its own) and nothing
but the standard library and mini-swe-agent. Rollgate never imports it."""
