"""Black-box agent harnesses as Rollgate agents (docs/agents.md).

Three plugins of the `rollgate.agents` group: `harness`, the kind (configured per harness as a
settings entry `{name, kind: harness, command: [...], ...}`); `smolagents`, the same kind with
smolagents' command line as its defaults; and `mini_swe_agent`, mini-swe-agent's command line with
its commands run in the episode's environment session (the swe family's sandbox)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollgate.agent_server.harness.agent import HarnessAgent
from rollgate.agent_server.harness.config import HarnessConfig, MiniSweAgentConfig, SmolagentsConfig
from rollgate.agent_server.plugins import AgentParts

__all__ = [
    "HarnessAgent",
    "HarnessConfig",
    "MiniSweAgentConfig",
    "SmolagentsConfig",
    "harness",
    "mini_swe_agent",
    "smolagents",
]


def harness(parts: AgentParts, options: Mapping[str, Any]) -> HarnessAgent:
    return HarnessAgent(HarnessConfig.model_validate(dict(options)), parts)


def smolagents(parts: AgentParts, options: Mapping[str, Any]) -> HarnessAgent:
    return HarnessAgent(SmolagentsConfig.model_validate(dict(options)), parts)


def mini_swe_agent(parts: AgentParts, options: Mapping[str, Any]) -> HarnessAgent:
    return HarnessAgent(MiniSweAgentConfig.model_validate(dict(options)), parts)


harness.options_model = HarnessConfig  # type: ignore[attr-defined]
smolagents.options_model = SmolagentsConfig  # type: ignore[attr-defined]
mini_swe_agent.options_model = MiniSweAgentConfig  # type: ignore[attr-defined]
# Each can play one role of a multi-role episode (docs/roles.md): the gateway accepts them in roles.
for _kind in (harness, smolagents, mini_swe_agent):
    _kind.plays_roles = True  # type: ignore[attr-defined]
