"""A rollout job as a trainer submits it, and its expansion into queue tasks.

The gateway's submit route is an edge: every row is parsed here, once (rollgate.core.rows), and
its task id, environment and row index ride on each TaskEnvelope from then on."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.rows import group_id, parse_row
from rollgate.core.schemas import JsonInt, RolePolicy, SamplingOverrides
from rollgate.jobs.queue import EvalOptions, JobPurpose, JobSpec, TaskEnvelope
from rollgate.jobs.roles import check_env_roles, check_job_roles, env_class

if TYPE_CHECKING:
    from rollgate.resources_servers.registry import EnvRegistry

COMPONENT = "gateway"
DEFAULT_REWARD_RANGE = (0.0, 1.0)
MAX_RETRY_ERRORS = 10
MAX_PRIORITY = 100


class RolloutRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: list[Any] = Field(description="task rows (NeMo Gym format accepted unchanged)")
    env: str | None = Field(None, description="environment of rows that name none")
    repeats: JsonInt = Field(1, ge=1, le=1024, description="samples per task (one group per task)")
    sampling: SamplingOverrides = Field(default_factory=SamplingOverrides)
    policy_version: str | None = Field(None, max_length=256, description="recorded on every trajectory")
    purpose: JobPurpose = Field(
        "train",
        description='"train" (a batch for a trainer) or "eval" (measures the policy version: '
        "GET /v1/rollouts/{job}/report answers mean reward and pass@k with 95% intervals when it ends; "
        "with `roles`, each role's and policy's win / draw / loss rates)",
    )
    k: JsonInt | None = Field(
        None, ge=1, le=1024, description="eval only: samples per task (the same as repeats; give one or both, equal)"
    )
    threshold: float | None = Field(
        None,
        allow_inf_nan=False,
        description="eval only: a sample is correct when reward >= threshold (default 1.0); it must lie in "
        "each environment's reward range (lo, hi]",
    )
    pass_k: list[JsonInt] | None = Field(
        None,
        min_length=1,
        max_length=32,
        description="eval only: the k values of pass@k (default 1, 2, 4, ... up to k, and k)",
    )
    retry_errors: JsonInt | None = Field(
        None,
        ge=0,
        le=MAX_RETRY_ERRORS,
        description="re-runs (each a fresh episode with a fresh session) of an episode that ended env_error, "
        "model_error or timeout; completed, truncated and cancelled episodes are never re-run. "
        "Default: the gateway's gateway.retry_errors",
    )
    agent: str | None = Field(
        None,
        max_length=64,
        description="the agent that runs the episodes: the shipped loop (default, `rollgate`), a black-box "
        "harness, or a plugin; GET /v1/agents lists them (docs/agents.md)",
    )
    priority: JsonInt = Field(
        1,
        ge=1,
        le=MAX_PRIORITY,
        description="the job's share of the workers against other running jobs (weighted round-robin): "
        "a job of priority 2 gets twice the tasks of a job of priority 1 while both have work",
    )

    roles: dict[str, RolePolicy] | None = Field(
        None,
        max_length=16,
        description="a multi-role environment's job: each role -> its policy (model, sampling, agent, "
        "policy_version); the same model for two roles is self-play. Each episode yields one trajectory "
        "per role, linked by episode_id and group_id (docs/roles.md)",
    )


class SubmitResponse(BaseModel):
    job_id: str
    num_tasks: int
    num_rows: int
    repeats: int
    purpose: JobPurpose = "train"


def plan_job(
    req: RolloutRequest,
    *,
    known_envs: list[str],
    model_name: str,
    max_task_bytes: int = 1_000_000,
    retry_errors: int = 0,
    known_agents: list[str] | None = None,
    known_models: list[str] | None = None,
    registry: EnvRegistry | None = None,
    role_agents: list[str] | None = None,
) -> tuple[JobSpec, list[TaskEnvelope]]:
    """Validate every row (the first bad one is a 400 naming its index and field) and expand
    the job into tasks: rows x repeats, the repeats of a row sharing one group. `known_agents`:
    the agents a job may name (None: not checked here). `registry`: the environments whose classes
    the gateway knows (their roles and reward ranges are checked here; None: none). `role_agents`: the
    agents besides the shipped loop that may play a role (the harness agents; None: none)."""
    if not req.tasks:
        raise BadRequest("tasks: at least one task row is required", component=COMPONENT, field="tasks")
    if req.agent is not None and known_agents is not None and req.agent not in known_agents:
        raise BadRequest(
            f"agent: unknown agent {req.agent!r}; known: {', '.join(sorted(known_agents)) or 'none'} "
            "(GET /v1/agents says why one cannot run)",
            component=COMPONENT,
            field="agent",
        )
    if req.env is not None and req.env not in known_envs:
        raise BadRequest(
            f"env: unknown environment {req.env!r}; this gateway serves: {', '.join(sorted(known_envs)) or 'none'}",
            component=COMPONENT,
            field="env",
        )
    # a row that names no environment runs in the job's, else in the only one this gateway serves
    default_env = req.env or (known_envs[0] if len(known_envs) == 1 else None)
    repeats, eval_options = eval_plan(req)
    retries = retry_errors if req.retry_errors is None else req.retry_errors
    job_id = f"job_{uuid.uuid4().hex}"
    sampling = req.sampling.model_dump(exclude_none=True)
    roles = check_job_roles(req, known_models or [model_name], role_agents or [])
    tasks: list[TaskEnvelope] = []
    for i, raw in enumerate(req.tasks):
        if isinstance(raw, dict):
            size = len(jsonutil.dumps(raw))
            if size > max_task_bytes:
                raise BadRequest(
                    f"tasks[{i}]: row is {size} bytes, over the limit of {max_task_bytes} (gateway.max_task_bytes)",
                    component=COMPONENT,
                    field=f"tasks[{i}]",
                )
        task = parse_row(
            raw, env=default_env, known_envs=known_envs, row_index=i, where=f"tasks[{i}]", component=COMPONENT
        )
        check_env_roles(task.env, req.roles, where=f"tasks[{i}]", registry=registry)
        group = group_id(task.task_id, job_id=job_id, row_index=i)
        row = task.dump()
        for s in range(repeats):
            tasks.append(
                TaskEnvelope(
                    job_id=job_id,
                    key=f"{i}.{s}",
                    index=i,
                    sample_index=s,
                    group_id=group,
                    task_id=task.task_id,
                    row=row,
                    env=task.env,
                    sampling=sampling,
                    policy_version=req.policy_version,
                    retry_errors=retries,
                    agent=req.agent,
                    roles=roles,
                )
            )
    if eval_options is not None and roles is None:  # a job with roles is scored by play: no threshold
        check_threshold(
            eval_options.threshold, sorted({t.env for t in tasks}), partial(reward_range, registry=registry)
        )
    spec = JobSpec(
        job_id=job_id,
        created_at=time.time(),
        num_tasks=len(tasks),
        num_rows=len(req.tasks),
        repeats=repeats,
        env=req.env,
        policy_version=req.policy_version,
        sampling=sampling,
        model=model_name,
        purpose=req.purpose,
        eval=eval_options,
        retry_errors=retries,
        priority=req.priority,
        agent=req.agent,
        roles=roles,
    )
    return spec, tasks


def default_pass_k(k: int) -> list[int]:
    """1, 2, 4, ... up to k, and k itself (what `rollgate eval` reports by default)."""
    out, x = [], 1
    while x < k:
        out.append(x)
        x *= 2
    return [*out, k]


def eval_plan(req: RolloutRequest) -> tuple[int, EvalOptions | None]:
    """-> (repeats, evaluation options). k is the evaluation's name for repeats: both may be
    given only when they agree, and the eval-only fields on a training job are refused rather
    than silently ignored."""
    if req.purpose != "eval":
        for name in ("k", "threshold", "pass_k"):
            if getattr(req, name) is not None:
                raise BadRequest(
                    f'{name}: only evaluation jobs take {name}; add "purpose": "eval"',
                    component=COMPONENT,
                    field=name,
                )
        return req.repeats, None
    given_repeats = "repeats" in req.model_fields_set
    if req.k is not None and given_repeats and req.k != req.repeats:
        raise BadRequest(
            f"k: k={req.k} and repeats={req.repeats} disagree (k is the samples per task; give one of them)",
            component=COMPONENT,
            field="k",
        )
    k = req.k if req.k is not None else req.repeats
    # pass@1 is always reported: it is the learning curve's headline number.
    pass_k = sorted(set(req.pass_k) | {1}) if req.pass_k is not None else default_pass_k(k)
    bad = [x for x in pass_k if not 1 <= x <= k]
    if bad:
        raise BadRequest(
            f"pass_k: {bad[0]} is outside 1..k={k} (pass@k needs at least k samples per task)",
            component=COMPONENT,
            field="pass_k",
        )
    threshold = 1.0 if req.threshold is None else req.threshold
    return k, EvalOptions(k=k, threshold=threshold, pass_k=pass_k)


def reward_range(env: str, registry: EnvRegistry | None) -> tuple[float, float]:
    """An environment's declared reward range (`reward_range` on its class), else [0, 1]: an
    environment whose class the gateway does not know (`env_class`) is assumed to use the usual range."""
    cls = env_class(env, registry)
    lo, hi = getattr(cls, "reward_range", DEFAULT_REWARD_RANGE) if cls is not None else DEFAULT_REWARD_RANGE
    return float(lo), float(hi)


def check_threshold(threshold: float, envs: Iterable[str], ranges: Callable[[str], tuple[float, float]]) -> None:
    """At or below an environment's lowest reward every sample would be correct, above its
    highest none could be: both are mistakes, named with the environment."""
    for env in envs:
        lo, hi = ranges(env)
        if not (math.isfinite(threshold) and lo < threshold <= hi):
            raise BadRequest(
                f"threshold: {threshold:g} is outside the reward range of {env!r} ({lo:g}, {hi:g}]: "
                "no sample could be correct, or every one would",
                component=COMPONENT,
                field="threshold",
            )
