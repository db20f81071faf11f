"""Lost queue state on Redis: a job whose keys vanished while it ran (Redis restarted without
persistence, was flushed, or evicted keys) must end `failed`, never stay `running` forever, and
still yield exactly one record per (row, sample) as its readers see it.

Detection: whoever reads a job (progress, the results stream) and, in the gateway, a periodic
sweep of the running jobs it knows (`sweep_lost`) run one pipelined EXISTS of the keys a running
job always has. The process that flips the job to failed (one Lua script, so two noticing at
once agree on one) rebuilds its records alone: worker records are refused from then on
(COMPLETE), so positions cannot interleave.

The rebuild keeps the results cursor and the one-record rule across the loss. Each process
remembers the task keys of the records it has read, in position order (`ReadLog`; the Redis
queue stores a record's key in front of its JSON). The positions it read that the list no longer
holds get a failure record each for the same task, in the same order, so a reader resuming at
cursor N receives records N+1... for exactly the tasks it has not seen; every other task without
a record gets one after them. Failure records carry row_index and sample_index. Limit: the
memory is per process, so with several gateways the one that notices first rebuilds from what
it has read; a trainer that streamed through another may see a task twice or miss one.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rollgate.core.schemas import ErrorInfo, ErrorKind, FailureRecord
from rollgate.jobs.queue import JobSpec, TaskEnvelope, record_key

if TYPE_CHECKING:
    from rollgate.jobs.redis import RedisJobQueue

log = logging.getLogger("rollgate.queue")

# One job's slot. KEYS: stats, done ; ARGV: total, now, message, ttl
# -> 2 when this call failed the job for data loss, 1 when another already had, 0 when it
#    finished or was cancelled before.
MARK_LOST = """
local st = redis.call('HGET', KEYS[1], 'state')
if st == 'failed' then return 1 end
if st and st ~= 'running' then return 0 end
local done = redis.call('HLEN', KEYS[2])
redis.call('HSET', KEYS[1], 'state', 'failed', 'total', ARGV[1], 'done', done, 'finished_at', ARGV[2],
  'error', ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return 2
"""

# The keys every running job has from submission on (`done` and `results` appear with the first
# record, so their absence proves nothing).
REQUIRED = ("spec", "tasks", "stats", "stream")


def loss_message(missing: list[str], lost: int) -> str:
    return (
        f"Redis data loss: the job's queue state ({', '.join(missing)}) vanished while it ran "
        "(Redis restarted without persistence, was flushed, or evicted keys); "
        f"{lost} task(s) without a record were failed. Configure Redis with appendonly yes and "
        "maxmemory-policy noeviction (the shipped compose and k8s Redis do)"
    )


def task_keys(spec: JobSpec) -> list[str]:
    """Every task key of a job, as rollgate.jobs.plan names them (row.sample)."""
    return [f"{i}.{s}" for i in range(spec.num_rows) for s in range(spec.repeats)]


class ReadLog:
    """Per running job, the task keys of the records this process has read, by position."""

    MAX_JOBS = 1000

    def __init__(self) -> None:
        self.keys: dict[str, list[str]] = {}

    def gap(self, job_id: str, after: int) -> int:
        """How many positions before `after` this process has not read (it started mid-stream)."""
        return max(0, after - len(self.keys.get(job_id, ())))

    def note(self, job_id: str, after: int, stored: list[bytes]) -> None:
        log = self.keys.get(job_id)
        if log is None:
            if len(self.keys) >= self.MAX_JOBS:
                self.keys.pop(next(iter(self.keys)))
            log = self.keys[job_id] = []
        if after > len(log):
            return  # a gap: the caller fills it first (RedisJobQueue.results)
        new = stored[len(log) - after :]
        log.extend(k for k in map(record_key, new) if k is not None)

    def forget(self, job_id: str) -> None:
        self.keys.pop(job_id, None)


def lost_record(spec: JobSpec, key: str, task: TaskEnvelope | None, message: str) -> dict[str, Any]:
    row, _, sample = key.partition(".")
    return FailureRecord(
        task_id=task.task_id if task is not None else None,
        row_index=task.index if task is not None else int(row),
        sample_index=task.sample_index if task is not None else int(sample or 0),
        job_id=spec.job_id,
        error=ErrorInfo(kind=ErrorKind.upstream, component="redis", message=message),
    ).model_dump(mode="json", exclude_none=True)


def may_have_lost(q: RedisJobQueue, spec: JobSpec) -> bool:
    """Keys can vanish legitimately when their TTL ran out: only a job younger than its TTL (with
    a minute's margin), whose last state this process saw was running, can have been lost."""
    young = time.time() < spec.created_at + q.result_ttl_s - 60
    return young and q._last_state.get(spec.job_id, "running") == "running"


async def mark_lost(q: RedisJobQueue, spec: JobSpec, missing: list[str]) -> None:
    j = spec.job_id
    done = {k.decode() for k in await q._call(q._r.hkeys(q._jk(j, "done")))}
    raw_tasks = await q._call(q._r.hgetall(q._jk(j, "tasks")))
    tasks = {k.decode(): TaskEnvelope.model_validate_json(v) for k, v in raw_tasks.items()}
    held = await q._call(q._r.llen(q._jk(j, "results")))
    read = q._read.keys.get(j, [])
    # Positions this process read that the list lost: the same tasks again, in the same order.
    again = read[held:]
    seen = set(read) | done
    rest = [k for k in dict.fromkeys([*task_keys(spec), *tasks]) if k not in seen]
    message = loss_message(missing, len(again) + len(rest))
    marked = await q._call(
        q._r.eval(
            MARK_LOST,
            2,
            q._jk(j, "stats"),
            q._jk(j, "done"),
            spec.num_tasks,
            repr(time.time()),
            message,
            int(q.result_ttl_s),
        )
    )
    if marked != 2:
        return  # another reader rebuilds it, or it finished or was cancelled before
    log.error("job %s: %s", j, message, extra={"job_id": j})
    # The queue's global keys (their own slot): listed again if the list was lost, never claimed.
    await q._call(q._r.zadd(q._k("jobs"), {j: spec.created_at}))
    await q._leave_ring(j)
    # One at a time: positions follow the order of the calls.
    for key in [*again, *rest]:
        await q._store(j, key, lost_record(spec, key, tasks.get(key), message))
    # Put the spec back so that every gateway (not only those that cached it) can serve the job.
    await q._call(q._r.set(q._jk(j, "spec"), spec.model_dump_json(), ex=int(q.result_ttl_s)))


async def sweep_lost(q: RedisJobQueue) -> int:
    """The gateway's periodic check: every running job this process knows, one pipeline of
    EXISTS; a lost one is failed and rebuilt (so `GET /v1/rollouts` lists it failed without
    anyone reading it by id). -> the number of jobs found lost."""
    jobs = [j for j in list(q._specs) if q._last_state.get(j, "running") == "running"]
    found = 0
    for j in jobs:
        state, missing = await q._state(j, full=False)
        if state is not None and state != b"running":
            q._last_state[j] = state.decode()
            q._read.forget(j)
        elif await q._lost(j, missing):
            q._last_state[j] = "failed"
            found += 1
        elif state is None:  # expired by its TTL (or never this process's to watch): stop looking
            q._last_state[j] = "gone"
    return found


async def persistence_problem(client: Any) -> str | None:
    """What a crash of this Redis would lose, or None when it keeps an append-only file."""
    from redis.exceptions import RedisError

    try:
        aof = (await client.config_get("appendonly")).get("appendonly")
        save = (await client.config_get("save")).get("save")
    except RedisError as exc:  # managed services often rename or forbid CONFIG
        return f"cannot tell whether Redis persists its data (CONFIG GET refused: {exc})"
    if isinstance(aof, bytes):
        aof = aof.decode()
    if isinstance(save, bytes):
        save = save.decode()
    if aof == "yes":
        return None
    if save and save.strip():
        return (
            f"Redis keeps no append-only file (appendonly no; RDB snapshots only, save {save!r}): "
            "a crash loses every job queue write since the last snapshot"
        )
    return "Redis has no persistence (appendonly no, no RDB snapshots): a restart loses every job's queue state"
