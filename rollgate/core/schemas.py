"""Versioned wire schemas shared by every part of Rollgate.

SCHEMA_VERSION is bumped whenever a field of Trajectory or Turn changes meaning; readers
reject records of a newer version instead of guessing.
"""

from __future__ import annotations

import enum
import os
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    field_validator,
    model_serializer,
    model_validator,
)

from rollgate.core.items import Item
from rollgate.core.row_params import PARAMS_SCHEMA, check_params

SCHEMA_VERSION = 3  # 2: row_index and attempts on Trajectory, row_index on FailureRecord; 3: segmented


class Outcome(str, enum.Enum):
    """Every way an episode can end. Only `completed` and `truncated` carry a reward."""

    completed = "completed"  # the agent gave a final answer and it was verified
    truncated = "truncated"  # a turn or token budget ran out; the partial episode was verified
    env_error = "env_error"  # the resources server failed (seed, tool transport or verify)
    model_error = "model_error"  # the model server failed or answered garbage
    timeout = "timeout"  # the episode's wall-clock budget ran out
    cancelled = "cancelled"  # the job was cancelled before the episode finished

    @property
    def has_reward(self) -> bool:
        return self in (Outcome.completed, Outcome.truncated)


class ErrorKind(str, enum.Enum):
    """The typed failure taxonomy carried by error records (see rollgate.core.errors)."""

    bad_request = "bad_request"
    not_found = "not_found"
    capacity = "capacity"
    timeout = "timeout"
    upstream = "upstream"  # a dependency answered an error or could not be reached
    protocol = "protocol"  # a dependency answered something that breaks the contract
    judge = "judge"  # an LLM judge answered something unparseable
    internal = "internal"
    cancelled = "cancelled"


class ErrorInfo(BaseModel):
    """What went wrong, which part it was, and (where known) which input field."""

    kind: ErrorKind
    message: str
    component: str = Field(description="model | env | verify | agent | gateway | sandbox | store")
    field: str | None = None


# The integers of the wire (RFC 7493, I-JSON): exact in every JSON implementation, a double too.
MAX_JSON_INT = 2**53 - 1


def _integral(value: Any) -> Any:
    # JSON has one number type: 3.0 is the integer 3 (JSON Schema agrees); `true` is not 1
    if type(value) is float and value.is_integer() and abs(value) <= MAX_JSON_INT:
        return int(value)
    if type(value) is int and abs(value) > MAX_JSON_INT:
        raise ValueError(f"must lie in [-{MAX_JSON_INT}, {MAX_JSON_INT}] (RFC 7493)")
    return value


# An integer field of a wire model validated strictly (`model_validate(..., strict=True)`): what
# its JSON schema says (rollgate.core.openapi publishes the range), where pydantic's lax mode
# would also take true and "3".
JsonInt = Annotated[int, BeforeValidator(_integral), Strict()]


# what _check_params and parse_row (core/row_params.py) enforce, for the JSON schema (OpenAPI) of
# every route that takes a row
_PARAMS_SCHEMA = PARAMS_SCHEMA


class TaskRow(BaseModel):
    """One input task. NeMo Gym rows (`responses_create_params` + environment fields) are
    accepted unchanged: unknown top-level fields are kept as environment fields."""

    model_config = ConfigDict(extra="allow")

    responses_create_params: dict[str, Any] = Field(json_schema_extra=_PARAMS_SCHEMA)
    env: str | None = None
    task_id: str | None = None
    seed: JsonInt | None = None

    @field_validator("responses_create_params")
    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        inp = params.get("input")
        if inp is None:
            raise ValueError("responses_create_params.input is required")
        if not isinstance(inp, (str, list)):
            raise ValueError("responses_create_params.input must be a string or a list of items")
        check_params(params)  # a ParamError naming the field (parse_row reports it with the row's path)
        return params

    @property
    def env_fields(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def row(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class SamplingOverrides(BaseModel):
    """Sampling settings a job (or a caller) imposes over the rows' own: the one list of them."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = Field(None, ge=0, le=10)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: JsonInt | None = None
    max_output_tokens: JsonInt | None = Field(None, ge=1, le=1_000_000)


SAMPLING_KEYS = tuple(SamplingOverrides.model_fields)


class TaskRef(BaseModel):
    env: str
    task_id: str
    seed: int | None = None
    row: dict[str, Any]


class PolicyRef(BaseModel):
    model: str
    policy_version: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)


class Turn(BaseModel):
    """One model call: exactly what the model saw and produced, in token ids."""

    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    finish_reason: str | None = None
    weight_version: str | None = None

    @model_validator(mode="after")
    def _aligned(self) -> Turn:
        if len(self.generation_log_probs) != len(self.generation_token_ids):
            raise ValueError(
                "generation_log_probs must have one entry per generation token "
                f"({len(self.generation_log_probs)} != {len(self.generation_token_ids)})"
            )
        return self


class Timings(BaseModel):
    total_s: float = 0.0
    model_s: float = 0.0
    tools_s: float = 0.0
    verify_s: float = 0.0
    seed_s: float = 0.0


def new_id(prefix: str) -> str:
    """`prefix_` + 128 random bits in hex: like uuid4().hex without building a UUID (ids are opaque)."""
    return f"{prefix}_{os.urandom(16).hex()}"


class Trajectory(BaseModel):
    schema_version: int = SCHEMA_VERSION
    trajectory_id: str = Field(default_factory=lambda: new_id("traj"))
    group_id: str
    sample_index: int = 0
    row_index: int | None = None  # the row's position in its job or file (None in version 1 records)
    attempts: int = 1  # 1 + re-runs after infrastructure failures
    job_id: str | None = None
    task: TaskRef
    policy: PolicyRef
    messages: list[Item] = Field(default_factory=list)  # Responses-style items, token fields stripped
    turns: list[Turn] = Field(default_factory=list)
    # True when the turns are NOT one growing token sequence: a black-box harness rewrote its
    # history between model calls, so each turn is a segment of its own (prompt + generation).
    # Trainers that flatten an episode into one sequence must refuse or split such a trajectory.
    segmented: bool = False
    # Multi-role episodes (docs/roles.md): which role this trajectory is, and the episode its
    # roles' trajectories share (with the group id). Both absent on single-role trajectories.
    role: str | None = None
    episode_id: str | None = None
    reward: float | None = None
    reward_components: dict[str, float] | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    outcome: Outcome
    error: ErrorInfo | None = None
    timings: Timings = Field(default_factory=Timings)

    @model_validator(mode="after")
    def _consistent(self) -> Trajectory:
        if self.schema_version > SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is newer than {SCHEMA_VERSION}")
        if self.outcome.has_reward:
            if self.reward is None:
                raise ValueError(f"outcome {self.outcome.value} requires a reward")
        else:
            # Infrastructure failures are never written as reward 0: they carry no reward at all.
            if self.reward is not None:
                raise ValueError(f"outcome {self.outcome.value} must not carry a reward")
            if self.error is None:
                raise ValueError(f"outcome {self.outcome.value} requires an error record")
        if self.reward is not None:
            check_reward_sum(self.reward, self.reward_components)
        return self

    @model_serializer(mode="wrap")
    def _without_unset_role(self, handler):
        out = handler(self)
        if out.get("role") is None:  # single-role records stay as they always were
            out.pop("role", None)
            out.pop("episode_id", None)
        return out

    @property
    def ok(self) -> bool:
        return self.outcome.has_reward


def check_reward_sum(reward: float, components: dict[str, float] | None) -> None:
    """Reward components, where given, add up to the reward (to within float rounding)."""
    if components:
        total = sum(components.values())
        if abs(total - reward) > 1e-6:
            raise ValueError(f"reward_components sum to {total}, reward is {reward}")


class FailureRecord(BaseModel):
    """A task that could not even become a trajectory (e.g. a malformed input row)."""

    schema_version: int = SCHEMA_VERSION
    task_id: str | None = None
    row_index: int | None = None  # the row's position in its job
    sample_index: int | None = None  # which of the row's samples (a job's repeats)
    line: int | None = None  # the 1-based line of the task file (rollgate collect)
    job_id: str | None = None
    error: ErrorInfo


# Resources-server wire types ------------------------------------------------------------


def _drop_none(handler, value, keys: tuple[str, ...]) -> dict[str, Any]:
    out = handler(value)
    for key in keys:
        if out.get(key) is None:
            out.pop(key, None)
    return out


class SeedResponse(BaseModel):
    session_id: str
    observation: str | None = None
    turn: str | None = None  # a multi-role environment: the role that moves first

    @model_serializer(mode="wrap")
    def _plain(self, handler):
        return _drop_none(handler, self, ("turn",))


class ToolCallRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class ToolOutput(BaseModel):
    output: str
    is_error: bool = False
    # a multi-role environment: whose turn it is after this call (None with done: nobody's)
    turn: str | None = None
    done: bool | None = None

    @model_serializer(mode="wrap")
    def _plain(self, handler):
        return _drop_none(handler, self, ("turn", "done"))


class RoleView(BaseModel):
    """What one role of a multi-role session sees now (POST /sessions/{id}/observe): the text
    addressed to it since it last looked, and whose turn it is (None once the episode is over)."""

    role: str
    observation: str = ""
    turn: str | None = None
    done: bool = False


class VerifyRequest(BaseModel):
    """What the agent hands to verify: the final response text and/or the transcript."""

    model_config = ConfigDict(extra="allow")
    response: str | None = None
    transcript: list[Item] | None = None
    # close the session once verified: the agent's last call to the environment, one round trip less
    close: bool = False
    role: str | None = None  # a multi-role environment: whose verdict (each role has its own reward)


class VerifyResult(BaseModel):
    reward: float
    reward_components: dict[str, float] | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    closed: bool | None = None  # True: the session was closed with it (VerifyRequest.close)

    @model_serializer(mode="wrap")
    def _without_unset_closed(self, handler):
        out = handler(self)
        if out.get("closed") is None:  # answers to plain verify calls stay as they always were
            out.pop("closed", None)
        return out

    @model_validator(mode="after")
    def _sum(self) -> VerifyResult:
        check_reward_sum(self.reward, self.reward_components)
        return self


# Multi-role episodes (docs/roles.md) ----------------------------------------------------


class RolePolicy(BaseModel):
    """Who plays one role of a job's multi-role episodes."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, max_length=256, description="a model the gateway serves (default: its own)")
    sampling: SamplingOverrides = Field(default_factory=SamplingOverrides)
    agent: str | None = Field(
        None,
        max_length=64,
        description="who plays the role: `rollgate` (the loop, the default) or a harness agent (docs/roles.md)",
    )
    policy_version: str | None = Field(None, max_length=256, description="recorded on this role's trajectories")
    instructions: str | None = Field(None, max_length=100_000, description="this role's system prompt")
    metadata: dict[str, str] | None = Field(None, description="sent with each of this role's model calls")


class EpisodeRecord(BaseModel):
    """The job queue's one record of a multi-role task: one trajectory per role, one episode."""

    schema_version: int = SCHEMA_VERSION
    episode_id: str
    group_id: str
    job_id: str | None = None
    row_index: int | None = None
    sample_index: int = 0
    outcome: Outcome  # the episode's: the same on every role's trajectory
    trajectories: list[Trajectory]
