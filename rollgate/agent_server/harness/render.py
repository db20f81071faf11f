"""What a harness process is given: its argv and environment, rendered from the HarnessConfig's
templates for one episode (placeholders: rollgate.agent_server.harness.config)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from rollgate.agent_server.harness.config import HarnessConfig
from rollgate.core.rows import Task

# Variables every harness gets, whatever its templates say (docs/agents.md).
ENV_PREFIX = "ROLLGATE_"


@dataclass(frozen=True)
class EpisodeView:
    """The episode as the harness sees it."""

    task: str
    issue: str  # the task without the environment's instructions and system prompt
    model: str
    model_url: str  # the model server's base URL (no capture prefix)
    api_key: str
    episode: str  # the capture session
    session_id: str
    mcp_url: str
    tools: list[dict[str, Any]]
    workdir: str
    role: str = ""  # the role it plays in a multi-role episode (docs/roles.md)
    metadata: dict[str, str] = field(default_factory=dict)  # that role's policy metadata

    @property
    def base_url(self) -> str:
        return f"{self.model_url}/capture/{self.episode}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"{self.model_url}/capture/{self.episode}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("text"))
    return ""


def task_text(task: Task, observation: str | None, *, instructions: bool = True) -> str:
    """The task as one prompt: the row's instructions and input messages, then the seed's observation.
    Without `instructions`, the user messages and the observation only: the environment's own
    instructions describe its tools, which a harness that brings its own tools does not have."""
    rcp = task.row.responses_create_params
    parts: list[str] = []
    if instructions and isinstance(rcp.get("instructions"), str) and rcp["instructions"].strip():
        parts.append(rcp["instructions"].strip())
    roles = ("system", "developer", "user") if instructions else ("user",)
    raw = rcp["input"]
    if isinstance(raw, str):
        parts.append(raw)
    else:
        for item in raw:
            if isinstance(item, dict) and item.get("role") in roles:
                text = _text(item.get("content")).strip()
                if text:
                    parts.append(text)
    if observation:
        parts.append(observation)
    return "\n\n".join(parts)


def tools_text(tools: list[dict[str, Any]]) -> str:
    lines = []
    for t in tools:
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        params = (fn.get("parameters") or {}).get("properties") or {}
        args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in params.items())
        lines.append(f"- {fn.get('name')}({args}): {fn.get('description') or ''}".rstrip(": "))
    return "\n".join(lines)


def values(view: EpisodeView, prompt: str) -> dict[str, str]:
    return {
        "prompt": prompt,
        "task": view.task,
        "issue": view.issue,
        "model": view.model,
        "base_url": view.base_url,
        "anthropic_base_url": view.anthropic_base_url,
        "api_key": view.api_key,
        "mcp_url": view.mcp_url,
        "tools": tools_text(view.tools),
        "tools_json": json.dumps(view.tools, ensure_ascii=False),
        "session_id": view.session_id,
        "episode": view.episode,
        "workdir": view.workdir,
    }


def render(config: HarnessConfig, view: EpisodeView) -> tuple[list[str], dict[str, str]]:
    """-> (argv, environment)."""
    first = values(view, "")
    prompt = config.prompt.format_map({k: v for k, v in first.items() if k != "prompt"})
    vals = values(view, prompt)
    argv = [part.format_map(vals) for part in config.command]
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}  # none of ours leak in
    # Programs installed beside Rollgate (the same virtual environment) are found first.
    bindir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        env["PATH"] = bindir + (os.pathsep + path if path else "")
    if config.isolate_home:
        env.update(HOME=view.workdir, TMPDIR=view.workdir, XDG_CACHE_HOME=os.path.join(view.workdir, ".cache"))
    env.update(
        {
            "ROLLGATE_PROMPT": prompt,
            "ROLLGATE_MODEL": view.model,
            "ROLLGATE_BASE_URL": view.base_url,
            "ROLLGATE_API_KEY": view.api_key,
            "ROLLGATE_MCP_URL": view.mcp_url,
            "ROLLGATE_TOOLS": vals["tools_json"],
            "ROLLGATE_SESSION_ID": view.session_id,
            "ROLLGATE_EPISODE": view.episode,
            # what the openai and anthropic SDKs read when given nothing else
            "OPENAI_BASE_URL": view.base_url,
            "OPENAI_API_KEY": view.api_key,
            "ANTHROPIC_BASE_URL": view.anthropic_base_url,
            "ANTHROPIC_API_KEY": view.api_key,
        }
    )
    if view.role:  # a seat of a multi-role episode: which role, and its policy's metadata to send along
        env.update(ROLLGATE_ROLE=view.role, ROLLGATE_METADATA=json.dumps(view.metadata, ensure_ascii=False))
    env.update({k: v.format_map(vals) for k, v in config.env.items()})
    return argv, env
