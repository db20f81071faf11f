"""How one black-box harness is run: its command line, environment, budgets and where its final
answer comes from. Validated when the agent registry loads (a settings entry
`{name, kind: harness, command: [...], ...}`), so a bad entry is reported, never a failed job.

Templates (`command`, `env` values, `prompt`) take these placeholders (`{{`/`}}` for a literal brace):

    {prompt}       the task prompt (the `prompt` template rendered)
    {task}         the task's own text: instructions, input messages, the seed's observation
    {issue}        the same without the instructions and system messages (which describe the
                   environment's tools): for a harness that brings its own, such as mini-swe-agent
    {model}        the served model's name
    {base_url}     the model's Chat Completions / Responses base URL, ending in /v1; its path names
                   the episode's capture session, so every call is recorded to this episode
    {anthropic_base_url}  the same without /v1 (the anthropic SDK appends /v1/messages)
    {api_key}      the bearer token the model accepts ("rollgate" when auth is off)
    {mcp_url}      the session's tools over MCP (streamable HTTP); empty when none is served
    {tools}        the tools as text (name, description, arguments), {tools_json} as JSON
    {session_id}   the environment session, {episode} the capture session, {workdir} the
                   episode's own temporary directory (the harness's working directory)
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PLACEHOLDERS = frozenset(
    {
        "prompt",
        "task",
        "issue",
        "model",
        "base_url",
        "anthropic_base_url",
        "api_key",
        "mcp_url",
        "tools",
        "tools_json",
        "session_id",
        "episode",
        "workdir",
    }
)
PROMPT_PLACEHOLDERS = PLACEHOLDERS - {"prompt"}


def placeholders(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"{template!r}: {exc} (write {{{{ and }}}} for literal braces)") from None


def _check(template: str, allowed: frozenset[str]) -> str:
    bad = sorted(n for n in placeholders(template) if n not in allowed)
    if bad:
        raise ValueError(f"unknown placeholder {{{bad[0]}}} in {template!r}; known: {', '.join(sorted(allowed))}")
    return template


class HarnessConfig(BaseModel):
    """One harness kind (docs/agents.md). Budgets left unset take the agent settings'."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, description="argv template; the program is looked up on PATH")
    name: str | None = Field(None, description="the harness's name in errors and logs (default: the program)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables (templates)")
    prompt: str = Field("{task}", description="template of {prompt}")
    answer: Literal["last_message", "stdout"] = Field(
        "last_message",
        description="the final answer verified: the last assistant text the harness received, or its "
        "stdout's (the last match of answer_pattern, else its last non-empty line; falls back to the "
        "last assistant text when stdout has none)",
    )
    answer_pattern: str | None = Field(None, description="regex with one group, matched per line of stdout")
    ok_exit_codes: list[int] = Field(default_factory=lambda: [0], description="exit codes of a finished run")
    timeout_s: float | None = Field(None, gt=0, description="wall clock (default: agent.episode_timeout_s)")
    max_calls: int | None = Field(None, ge=1, le=500, description="model calls (default: agent.max_turns)")
    max_output_tokens: int | None = Field(
        None, ge=1, description="generated tokens over all calls (default: agent.max_output_tokens)"
    )
    keep_output_bytes: int = Field(64 * 1024, ge=1024, description="of each stream kept for errors and answers")
    flood_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="output beyond this kills it as flooding")
    poll_interval_s: float = Field(0.25, gt=0, le=5, description="how often budgets are checked")
    isolate_home: bool = Field(True, description="HOME and TMPDIR point into the episode's directory")

    @field_validator("command")
    @classmethod
    def _command(cls, command: list[str]) -> list[str]:
        for part in command:
            _check(part, PLACEHOLDERS)
        return command

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key, value in env.items():
            if not key or "=" in key:
                raise ValueError(f"environment variable name {key!r} is not valid")
            _check(value, PLACEHOLDERS)
        return env

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, prompt: str) -> str:
        return _check(prompt, frozenset(PROMPT_PLACEHOLDERS))

    @field_validator("answer_pattern")
    @classmethod
    def _pattern(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
            if compiled.groups != 1:
                raise ValueError(f"needs exactly one group (the answer), has {compiled.groups}")
        return pattern

    @model_validator(mode="after")
    def _name(self) -> HarnessConfig:
        if self.name is None:
            self.name = self.command[0].rsplit("/", 1)[-1] or "harness"
        return self


# smolagents' command line (`smolagent`): a CodeAgent over an OpenAI-compatible server. An empty
# `--tools` drops its default web search; it speaks Chat Completions only and rewrites its history
# (earlier steps come back as plain text), so its trajectories are segmented. It logs
# "Final answer: ..." when it finishes; rich wraps at COLUMNS.
SMOLAGENTS_COMMAND = [
    "smolagent",
    "{prompt}",
    "--model-type",
    "OpenAIModel",
    "--model-id",
    "{model}",
    "--api-base",
    "{base_url}",
    "--api-key",
    "{api_key}",
    "--tools",
]


class SmolagentsConfig(HarnessConfig):
    """The `smolagents` agent: HarnessConfig with smolagents' command line as the defaults."""

    command: list[str] = Field(default_factory=lambda: list(SMOLAGENTS_COMMAND), min_length=1)
    name: str | None = "smolagents"
    env: dict[str, str] = Field(default_factory=lambda: {"COLUMNS": "2000", "NO_COLOR": "1"})
    answer: Literal["last_message", "stdout"] = "stdout"
    answer_pattern: str | None = r"^Final answer: (.*)$"


# mini-swe-agent's `mini` CLI. Its adapter module (a folder of its own, put on mini's PYTHONPATH)
# is loaded by mini itself, in mini's virtual environment: rollgate_mini_env.SessionEnvironment.
MINI_ENV_DIR = str(Path(__file__).resolve().parent / "mini_swe_agent")
MINI_ENV_CLASS = "rollgate_mini_env.SessionEnvironment"
MINI_ENV = {
    "MSWEA_CONFIGURED": "true",  # no first-run setup dialog
    "MSWEA_GLOBAL_CONFIG_DIR": "{workdir}/mswea",  # its config and logs go with the episode
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost-map download
    "MSWEA_COST_TRACKING": "ignore_errors",  # a served model has no price
}


def _literal(text: str) -> str:
    """A value put into a template as is (a JSON override holds braces)."""
    return text.replace("{", "{{").replace("}", "}}")


class MiniSweAgentConfig(HarnessConfig):
    """The `mini_swe_agent` agent: mini-swe-agent's `mini` CLI with every command it runs sent to
    the episode's environment session (its `shell` tool: the swe family's sandbox), never the host.
    The command line is derived from `mini`, `mini_config` and `sandbox` unless `command` is given."""

    command: list[str] = Field(default_factory=list, description="argv template (default: derived, see above)")
    name: str | None = "mini-swe-agent"
    # mini brings its own instructions and one tool (bash): the environment's, which name its
    # tools (list_files, apply_patch, ...), would mislead the model
    prompt: str = Field("{issue}", description="template of {prompt}")
    mini: str = Field("mini", description="the `mini` program; its absolute path when it lives in another venv")
    mini_config: list[str] = Field(
        default_factory=lambda: ["mini.yaml"],
        description="mini's -c specs in order: config files (its built-in mini.yaml) or key=value overrides "
        "(a value is JSON or a string); taken literally, not as templates",
    )
    sandbox: bool = Field(
        True,
        description="run every command in the episode's environment session (its `shell` tool) instead of "
        "mini's own `local` environment on the host",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="extra environment variables (templates), over MINI_ENV's"
    )

    @model_validator(mode="after")
    def _mini_command(self) -> MiniSweAgentConfig:
        if not self.command:
            specs = [_literal(spec) for spec in self.mini_config] + ["model.model_kwargs.api_base={base_url}"]
            if self.sandbox:
                specs.append(f"environment.environment_class={MINI_ENV_CLASS}")
            self.command = [
                _literal(self.mini),
                *("-m", "openai/{model}", "-t", "{prompt}", "-y", "--exit-immediately"),
                *(arg for spec in specs for arg in ("-c", spec)),
                *("-o", "{workdir}/mini.traj.json"),
            ]
        self.env = {**MINI_ENV, **self.env}
        if self.sandbox:
            # only the adapter's folder: the harness's own packages come from its own venv
            self.env = {**self.env, "PYTHONPATH": _literal(MINI_ENV_DIR)}
        return self
