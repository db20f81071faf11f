"""Black-box agent harnesses as Rollgate agents (docs/agents.md).

Two plugins of the `rollgate.agents` group: `harness`, the kind (configured per harness as a
settings entry `{name, kind: harness, command: [...], ...}`), and `smolagents`, the same kind with
smolagents' command line as its defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollgate.agent_server.harness.agent import HarnessAgent
from rollgate.agent_server.harness.config import HarnessConfig, SmolagentsConfig
from rollgate.agent_server.plugins import AgentParts

__all__ = ["HarnessAgent", "HarnessConfig", "SmolagentsConfig", "harness", "smolagents"]


def harness(parts: AgentParts, options: Mapping[str, Any]) -> HarnessAgent:
    return HarnessAgent(HarnessConfig.model_validate(dict(options)), parts)


def smolagents(parts: AgentParts, options: Mapping[str, Any]) -> HarnessAgent:
    return HarnessAgent(SmolagentsConfig.model_validate(dict(options)), parts)


harness.options_model = HarnessConfig  # type: ignore[attr-defined]
smolagents.options_model = SmolagentsConfig  # type: ignore[attr-defined]
