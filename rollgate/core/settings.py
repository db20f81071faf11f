"""Settings of every part, in one tree.

Sources, lowest precedence first: defaults, a YAML file (`--config FILE` or ROLLGATE_CONFIG),
environment variables (ROLLGATE_<SECTION>__<FIELD>, e.g. ROLLGATE_MODEL__BACKEND=vllm), then
command-line flags; pydantic-settings reads and deep-merges them when a Settings is made, never
at import. Defaults that depend on another setting (the tiny model under `home`) are derived
after the merge, so a `home:` in YAML moves them too. Pass the Settings object explicitly;
nothing reads the environment later.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from rollgate.core import model_registry

TINY_MODEL_DIR = "tiny-model"  # under `home`: the default model_path


def default_home() -> str:
    """Rollgate's cache (models, the demo's policy) when neither ROLLGATE_HOME nor `home` is set."""
    return str(Path.home() / ".cache" / "rollgate")


class ModelSettings(BaseModel):
    backend: Literal["local", "vllm", "openai", "scripted"] = "local"
    # local: a transformers model directory (the tiny model is built here when missing); unset,
    # Settings derives it: <home>/tiny-model
    model_path: str | None = None
    served_name: str = "rollgate-tiny"
    device: str = "auto"  # auto | cpu | cuda
    max_batch_size: int = 64
    batch_window_ms: float = 5.0
    max_queue: int = 4096  # requests waiting for the local engine beyond this are refused (503)
    # local: keep prompts' and finished sequences' KV so an episode's next call and a group's other
    # samples prefill only their new tokens (least recently used dropped beyond kv_cache_mb)
    kv_reuse: bool = True
    kv_cache_mb: float = Field(default=1024.0, ge=0)
    max_context_tokens: int | None = None  # default: the model's own limit
    # local: structured output's compiler and token masks: "native" (a JSON-schema subset) or
    # "llguidance" (vLLM's guidance backend, more of JSON Schema: pip install 'rollgate[guides]')
    guide_backend: Literal["native", "llguidance"] = "native"
    default_max_output_tokens: int = 256
    # vllm: upstream OpenAI-compatible vLLM servers; openai: one Responses endpoint
    upstream_urls: list[str] = Field(default_factory=list)
    upstream_api_key: str | None = None
    upstream_model: str | None = None
    health_interval_s: float = 5.0
    timeout_s: float = 120.0
    # training mode on for every request (otherwise per request: metadata {"rollgate_training": "true"})
    training_mode: bool = False
    # How the model talks, per model (vLLM's --chat-template, --tool-call-parser, --reasoning-parser);
    # `--model NAME` fills them from the registry (core/model_registry.py) unless they are set.
    # chat_template: a shipped template's name ("chatml", "tiny"), a Jinja file or the template text;
    # None ("builtin"): the checkpoint's own. tool_call_format: "hermes", "llama3_json".
    # reasoning_format: "think", "none"; None: "think"
    chat_template: str | None = None
    tool_call_format: str = model_registry.DEFAULT_TOOL_CALL_FORMAT
    reasoning_format: str | None = None

    @field_validator("chat_template")
    @classmethod
    def _chat_template(cls, value: str | None) -> str | None:
        return model_registry.check_chat_template(value)

    @field_validator("tool_call_format")
    @classmethod
    def _tool_call_format(cls, value: str) -> str:
        return model_registry.check_tool_call_format(value)

    @field_validator("reasoning_format")
    @classmethod
    def _reasoning_format(cls, value: str | None) -> str | None:
        return model_registry.check_reasoning_format(value)


class AgentSettings(BaseModel):
    max_turns: int = 8
    max_output_tokens: int = 1024  # per episode, summed over model calls
    max_output_tokens_per_call: int = 256
    episode_timeout_s: float = 300.0
    model_timeout_s: float = 120.0
    tool_timeout_s: float = 60.0
    verify_timeout_s: float = 60.0
    seed_timeout_s: float = 30.0
    retries: int = 3  # attempts for transient transport errors
    concurrency: int = 64  # episodes one agent worker runs at once
    # model and tool calls to Rollgate servers multiplexed over one WebSocket per server
    # (core/channel.py); upstreams that do not speak it are called over plain HTTP
    channel: bool = True


class SessionSettings(BaseModel):
    ttl_s: float = 3600.0
    capacity: int = 100_000


class GatewaySettings(BaseModel):
    max_queued_tasks: int = 100_000  # tasks waiting across all jobs; beyond, 503 + Retry-After
    max_task_bytes: int = 1_000_000
    visibility_timeout_s: float = 60.0  # a claimed task not acked (nor heartbeated) by then is reclaimed
    result_ttl_s: float = 7 * 24 * 3600.0
    ui: bool = True
    # roles gateway and agent refuse to start without api_key unless auth is switched off here
    auth: bool = True
    queue_prefix: str = "rollgate:q"  # Redis key prefix of the job queue
    # re-runs of an episode that ended env_error, model_error or timeout, for jobs that name none
    retry_errors: int = Field(0, ge=0, le=10)


class SandboxSettings(BaseModel):
    """Where the `code` environment runs model-written code (see docs/sandbox.md)."""

    provider: Literal["local", "docker", "kubernetes", "remote"] = "local"
    pool_size: int = 0  # warm sandboxes kept ready (providers with a start cost)
    options: dict[str, Any] = Field(default_factory=dict)  # provider constructor options (image, namespace, ...)
    # Run model-written code even where the provider cannot isolate it (no network/PID/mount
    # namespaces): off by default, so the code environment and role sandbox refuse to start instead.
    allow_unisolated: bool = False
    # provider remote: the sandbox service (`rollgate serve --role sandbox`) and its bearer token;
    # role sandbox: the token it requires
    url: str | None = None
    token: str | None = None


class SweSettings(BaseModel):
    """Where the `swe/<project>` family runs its checkouts (docs/environments.md)."""

    # local (bubblewrap) or docker (the one swe image: scripts/docker-swe-image.sh)
    provider: Literal["local", "docker"] = "local"
    options: dict[str, Any] = Field(default_factory=dict)  # provider options (docker: image, cpus, ...)
    # sandboxes per project made ahead with the pristine checkout, so a seed skips the copy; 0: off
    warm_pool: int = Field(2, ge=0, le=64)


class EnvEntry(BaseModel):
    """An environment configured by entry instead of installed: `{name, kind, <kind's options>}`,
    e.g. `{name: ng_weather, kind: nemo_gym, urls: [...]}` (docs/interop.md). The kind's own
    module validates the options (resources_servers/external.py)."""

    model_config = ConfigDict(extra="allow")
    name: str
    kind: str

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not name or any(c in name for c in "*?[] ,"):
            raise ValueError(
                f"an environment name must be non-empty, without spaces, commas or glob characters: {name!r}"
            )
        return name

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class AgentEntry(BaseModel):
    """An agent configured by entry: `{name, kind, <kind's options>}`, where kind names a plugin of
    the `rollgate.agents` group, e.g. `{name: my-harness, kind: harness, command: [...]}`
    (docs/agents.md). The kind's plugin validates the options."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    kind: str

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROLLGATE_", env_nested_delimiter="__", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    # None: in-memory stores and queue (embedded); redis:// or rediss:// one server;
    # redis+cluster://HOST:PORT[,HOST:PORT...] (rediss+cluster:// for TLS) a Redis Cluster
    redis_url: str | None = None
    api_key: str | None = None  # bearer token; required by every role but the embedded one
    home: str = Field(default_factory=default_home)  # ROLLGATE_HOME
    log_json: bool = False
    log_level: str = "INFO"

    # which environments this process serves (role all/resources) or knows (agent, gateway)
    # (names or glob patterns: "*" is every available environment, "reasoning_gym/*" one family;
    # see `rollgate envs`), and entries of external environments ({name, kind, ...}: EnvEntry)
    envs: list[str | EnvEntry] = Field(default_factory=lambda: ["*"])
    # distributed shape: where the parts are (env name -> replica base URLs)
    model_url: str | None = None
    # every model server replica behind model_url (e.g. the pods a load balancer spreads over), for
    # what must reach each one: weight updates (POST /v1/weights). Empty: model_url alone.
    model_urls: list[str] = Field(default_factory=list)
    env_urls: dict[str, list[str]] = Field(default_factory=dict)
    gateway_url: str | None = None
    # models a role of a multi-role job may name beside model.served_name (docs/roles.md):
    # name -> base URL of a server of the Responses API in training mode (another Rollgate model server)
    role_models: dict[str, str] = Field(default_factory=dict)

    model: ModelSettings = Field(default_factory=ModelSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    swe: SweSettings = Field(default_factory=SweSettings)
    # agents configured by entry (a job's `agent` picks one; installed plugins need no entry)
    agents: list[AgentEntry] = Field(default_factory=list)

    @property
    def env_names(self) -> list[str]:
        """`envs` as names and patterns (an entry counts by its name)."""
        return [e if isinstance(e, str) else e.name for e in self.envs]

    @property
    def env_entries(self) -> list[EnvEntry]:
        return [e for e in self.envs if isinstance(e, EnvEntry)]

    @model_validator(mode="after")
    def _derive_defaults(self) -> Settings:
        if self.model.model_path is None:
            self.model.model_path = self.default_model_path
        return self

    @property
    def default_model_path(self) -> str:
        """The tiny model under `home`, which the local backend builds when it is missing."""
        return str(Path(self.home) / TINY_MODEL_DIR)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init kwargs) > ROLLGATE_* variables > the YAML file > defaults."""
        kwargs = init_settings.init_kwargs if isinstance(init_settings, InitSettingsSource) else {}
        path = kwargs.get(CONFIG_FILE_KEY) or os.environ.get("ROLLGATE_CONFIG")
        if not path:
            return init_settings, env_settings
        if not Path(path).is_file():
            raise ValueError(f"config file {path} does not exist")
        return init_settings, env_settings, _YamlFile(settings_cls, yaml_file=path)

    @classmethod
    def load(cls, config_file: str | os.PathLike | None = None, **overrides: Any) -> Settings:
        """Settings from every source; `overrides` are command-line flags (None: not given)."""
        flags = {k: v for k, v in overrides.items() if v is not None}
        if config_file:
            flags[CONFIG_FILE_KEY] = str(config_file)  # read by settings_customise_sources, then ignored
        return cls(**flags)


class _YamlFile(YamlConfigSettingsSource):
    """pydantic-settings' YAML source, with the one check it lacks: a mapping at the top level."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        data = super()._read_file(file_path)
        if not isinstance(data, dict):
            raise ValueError(f"config file {file_path} must hold a mapping at the top level")
        return data


# An init keyword that names the YAML file; not a field (extra="ignore" drops it after use).
CONFIG_FILE_KEY = "rollgate_config_file"
