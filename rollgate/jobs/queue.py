"""The rollout job queue: one interface, two implementations (memory for the embedded shape,
Redis Streams for the distributed one).

Contract (tests/gateway/test_queue_contract.py runs it against both):
- `submit` enqueues every task of a job at once, or refuses the whole job with CapacityError
  when the queued tasks of all jobs would exceed the bound;
- a worker `claim`s tasks, keeps them alive with `heartbeat`, and `complete`s each with its
  record; a claimed task not heart-beaten within the visibility timeout is handed to another
  worker (the first worker is presumed dead);
- every task yields exactly one record: `complete` stores a record only if the task has none
  yet (a duplicate execution after a reclaim is dropped), and `cancel` writes a `cancelled`
  record for every task still without one;
- results are read in completion order by position (1-based), so a reader resumes after any
  disconnect from the last position it saw.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from rollgate.core import jsonutil
from rollgate.core.errors import ErrorKind
from rollgate.core.schemas import (
    EpisodeRecord,
    ErrorInfo,
    FailureRecord,
    Outcome,
    PolicyRef,
    TaskRef,
    Trajectory,
    new_id,
)

# A task whose claims outlive this many workers is failed instead of killing a fourth one.
DEFAULT_MAX_ATTEMPTS = 3

# "failed": the job's queue state was lost (rollgate.jobs.redis_loss); `error` says why.
JobState = Literal["running", "done", "cancelled", "failed"]
# What a job is for: "train" batches feed a trainer; "eval" jobs measure a policy version and
# have an evaluation report (GET /v1/rollouts/{job}/report).
JobPurpose = Literal["train", "eval"]


class EvalOptions(BaseModel):
    """How an evaluation job is scored (the same meaning as `rollgate eval`'s flags)."""

    k: int  # samples per task (the job's repeats)
    threshold: float = 1.0  # a sample is correct when reward >= threshold
    pass_k: list[int] = Field(default_factory=list)  # the k values of pass@k / majority@k


class TaskEnvelope(BaseModel):
    """One unit of work: one sample of one task row of one job."""

    job_id: str
    key: str  # unique within the job: "<row index>.<sample index>"
    index: int  # position of the row in the submitted job
    sample_index: int = 0
    group_id: str
    task_id: str  # the row's task_id, else its stable id (rollgate.core.rows)
    row: dict[str, Any]  # parsed once at submission: workers rebuild it with Task.trusted
    env: str
    sampling: dict[str, Any] = Field(default_factory=dict)
    policy_version: str | None = None
    retry_errors: int = 0  # re-runs of an episode that ended env_error, model_error or timeout
    agent: str | None = None  # the job's agent (rollgate.agent_server.plugins); None: the default loop
    roles: dict[str, Any] | None = None  # a multi-role job: role -> RolePolicy (docs/roles.md)


class JobSpec(BaseModel):
    job_id: str
    created_at: float = Field(default_factory=time.time)
    num_tasks: int  # rows x repeats: the number of records the job will yield
    num_rows: int
    repeats: int = 1
    env: str | None = None
    policy_version: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    model: str = "unknown"
    purpose: JobPurpose = "train"
    eval: EvalOptions | None = None
    retry_errors: int = 0
    priority: int = 1  # a job's share of the workers relative to other running jobs
    agent: str | None = None  # None: the default agent loop
    roles: dict[str, Any] | None = None  # a multi-role job: role -> RolePolicy


class JobProgress(BaseModel):
    job_id: str
    state: JobState
    total: int
    done: int
    counts: dict[str, int] = Field(default_factory=dict)  # outcome (or "failed") -> records
    mean_reward: float | None = None
    rewarded: int = 0  # records that carry a reward (mean_reward is over these)
    reclaimed: int = 0  # claims taken over from workers presumed dead
    created_at: float
    finished_at: float | None = None
    env: str | None = None
    policy_version: str | None = None
    # Additive (older stored specs read as a training job of an unknown model).
    model: str | None = None
    purpose: JobPurpose = "train"
    eval: EvalOptions | None = None
    retry_errors: int = 0
    priority: int = 1
    error: str | None = None  # why a `failed` job failed
    agent: str | None = None
    roles: dict[str, Any] | None = None  # a multi-role job: role -> RolePolicy

    @property
    def finished(self) -> bool:
        return self.state != "running"


@dataclass
class Claim:
    task: TaskEnvelope
    delivery_id: str  # the queue's handle for ack / heartbeat
    attempt: int = 1


class JobQueue(Protocol):
    max_queued_tasks: int
    visibility_timeout_s: float

    async def submit(self, spec: JobSpec, tasks: list[TaskEnvelope]) -> None: ...
    async def claim(self, consumer: str, count: int, *, block_s: float = 1.0) -> list[Claim]: ...
    async def heartbeat(self, consumer: str, claims: list[Claim]) -> None: ...
    async def release(self, consumer: str, claims: list[Claim]) -> None: ...
    async def complete(self, claim: Claim, record: dict[str, Any]) -> bool: ...
    async def cancel(self, job_id: str) -> JobProgress: ...
    async def cancelled(self, job_ids: list[str]) -> set[str]: ...
    async def progress(self, job_id: str) -> JobProgress: ...
    async def list_jobs(self, limit: int = 100) -> list[JobProgress]: ...
    async def results(self, job_id: str, after: int, limit: int = 1000) -> list[bytes]: ...
    async def wait_results(
        self, job_id: str, after: int, *, limit: int = 1000, timeout_s: float = 10.0
    ) -> list[bytes]: ...
    async def queued(self) -> int: ...
    async def persistence_warning(self) -> str | None: ...  # what a restart of the store would lose
    async def sweep_lost(self) -> int: ...  # fail the running jobs whose state the store lost
    async def close(self) -> None: ...


# Records are stored as one tag byte + JSON, so the results stream can be served without
# parsing: b"t" a Trajectory, b"f" a FailureRecord. The Redis queue puts the task's key between
# the tag and the JSON ("t3.1{...}"), so a reader knows which tasks it has seen records of without
# parsing them (what a job rebuilt after Redis data loss needs: rollgate.jobs.redis_loss).
TAG_TRAJECTORY = b"t"
TAG_FAILURE = b"f"
TAG_EPISODE = b"e"  # a multi-role task's EpisodeRecord: one trajectory per role


def encode_record(record: dict[str, Any], key: str | None = None) -> tuple[bytes, str, float | None]:
    """-> (stored bytes, stats label, reward or None)."""
    head = b"" if key is None else key.encode()
    if "trajectories" in record:  # its roles' rewards are not one reward (zero-sum: they add to 0)
        return TAG_EPISODE + head + jsonutil.dumps(record), str(record["outcome"]), None
    if "outcome" in record:
        outcome = str(record["outcome"])
        reward = record.get("reward")
        return TAG_TRAJECTORY + head + jsonutil.dumps(record), outcome, (float(reward) if reward is not None else None)
    return TAG_FAILURE + head + jsonutil.dumps(record), "failed", None


def decode_record(stored: bytes) -> tuple[str, bytes]:
    """-> ("trajectory" | "episode" | "failure", JSON bytes)."""
    tag = stored[:1]
    kind = "trajectory" if tag == TAG_TRAJECTORY else "episode" if tag == TAG_EPISODE else "failure"
    return kind, stored[stored.index(b"{", 1) :]


def record_key(stored: bytes) -> str | None:
    """The task key stored with a record (the Redis queue's), else None."""
    i = stored.index(b"{", 1)
    return stored[1:i].decode() if i > 1 else None


def cancelled_record(task: TaskEnvelope, spec: JobSpec) -> dict[str, Any]:
    if task.roles:  # a multi-role task: one cancelled trajectory per role, as one episode
        return cancelled_episode(task, spec)
    traj = Trajectory(
        group_id=task.group_id,
        sample_index=task.sample_index,
        row_index=task.index,
        job_id=task.job_id,
        task=TaskRef(env=task.env, task_id=task.task_id, seed=task.row.get("seed"), row=task.row),
        policy=PolicyRef(model=spec.model, policy_version=task.policy_version, sampling=task.sampling),
        outcome=Outcome.cancelled,
        error=ErrorInfo(
            kind=ErrorKind.cancelled, message="the job was cancelled before this episode finished", component="gateway"
        ),
    )
    return traj.model_dump(mode="json")


def abandoned_record(task: TaskEnvelope, attempts: int) -> dict[str, Any]:
    """A task every worker that claimed it died on: fail it rather than kill more workers."""
    return FailureRecord(
        task_id=task.task_id,
        row_index=task.index,
        sample_index=task.sample_index,
        job_id=task.job_id,
        error=ErrorInfo(
            kind=ErrorKind.internal,
            component="agent",
            message=f"task was claimed {attempts} times and no worker finished it "
            "(each worker died or stalled past the visibility timeout)",
        ),
    ).model_dump(mode="json", exclude_none=True)


def progress_from(
    spec: JobSpec,
    state: JobState,
    done: int,
    counts: dict[str, int],
    reward_sum: float,
    rewarded: int,
    reclaimed: int,
    finished_at: float | None,
    error: str | None = None,
) -> JobProgress:
    return JobProgress(
        job_id=spec.job_id,
        state=state,
        total=spec.num_tasks,
        done=done,
        counts=counts,
        mean_reward=(reward_sum / rewarded) if rewarded else None,
        rewarded=rewarded,
        reclaimed=reclaimed,
        created_at=spec.created_at,
        finished_at=finished_at,
        env=spec.env,
        policy_version=spec.policy_version,
        model=spec.model,
        purpose=spec.purpose,
        eval=spec.eval,
        retry_errors=spec.retry_errors,
        priority=spec.priority,
        error=error,
        agent=spec.agent,
        roles=spec.roles,
    )


def cancelled_episode(task: TaskEnvelope, spec: JobSpec) -> dict[str, Any]:
    episode_id = new_id("ep")
    trajectories = []
    for role, policy in (task.roles or {}).items():
        traj = Trajectory.model_validate(cancelled_record(task.model_copy(update={"roles": None}), spec))
        traj.role, traj.episode_id = role, episode_id
        traj.policy.model = policy.get("model") or spec.model
        traj.policy.policy_version = policy.get("policy_version") or task.policy_version
        trajectories.append(traj)
    return EpisodeRecord(
        episode_id=episode_id,
        group_id=task.group_id,
        job_id=task.job_id,
        row_index=task.index,
        sample_index=task.sample_index,
        outcome=Outcome.cancelled,
        trajectories=trajectories,
    ).model_dump(mode="json")
