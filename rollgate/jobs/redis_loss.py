"""Lost queue state on Redis: a job whose keys vanished while it ran (Redis restarted without
persistence, was flushed, or evicted keys) must end `failed`, never stay `running` forever.

Detection is done by whoever reads a job (the gateway's progress and its results stream, which
already poll Redis): one pipelined EXISTS of the keys a running job always has. The reader that
notices marks the job failed (one Lua script, so two gateways noticing at once agree) and stores a
typed failure record for every task without a record, through the queue's usual "set if absent"
path: a worker that finishes the same task at the same moment still yields exactly one record.

After a complete loss nothing says which tasks already had records, so every task gets a
failure record: a reader resuming by cursor receives the failures past its position, and the
job's state (`failed`, with `error`) tells it that the job's groups cannot be trusted as complete.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rollgate.core.schemas import ErrorInfo, ErrorKind, FailureRecord
from rollgate.jobs.queue import JobSpec, TaskEnvelope

if TYPE_CHECKING:
    from rollgate.jobs.redis import RedisJobQueue

log = logging.getLogger("rollgate.queue")

# One job's slot. KEYS: stats, done ; ARGV: total, now, message, ttl
# -> 1 when the job is (now) failed for data loss, 0 when it finished or was cancelled before.
MARK_LOST = """
local st = redis.call('HGET', KEYS[1], 'state')
if st == 'failed' then return 1 end
if st and st ~= 'running' then return 0 end
local done = redis.call('HLEN', KEYS[2])
redis.call('HSET', KEYS[1], 'state', 'failed', 'total', ARGV[1], 'done', done, 'finished_at', ARGV[2],
  'error', ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return 1
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


def lost_record(spec: JobSpec, key: str, task: TaskEnvelope | None, message: str) -> dict[str, Any]:
    row = task.index if task is not None else int(key.split(".", 1)[0])
    return FailureRecord(
        task_id=task.task_id if task is not None else None,
        row_index=row,
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
    keys = [k for k in dict.fromkeys([*task_keys(spec), *tasks]) if k not in done]
    message = loss_message(missing, len(keys))
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
    if not marked:
        return  # it finished or was cancelled meanwhile: its records are all there
    # The queue's global keys (their own slot): listed again if the list was lost, never claimed.
    await q._call(q._r.zadd(q._k("jobs"), {j: spec.created_at}))
    await q._call(q._r.lrem(q._k("active"), 0, j))
    log.error("job %s: %s", j, message, extra={"job_id": j})
    # Every reader that noticed stores the records: "set if absent" keeps one per task.
    for key in keys:
        await q._store(j, key, lost_record(spec, key, tasks.get(key), message))
    # Put the spec back so that every gateway (not only those that cached it) can serve the job.
    await q._call(q._r.set(q._jk(j, "spec"), spec.model_dump_json(), ex=int(q.result_ttl_s)))


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
