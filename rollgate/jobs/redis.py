"""The job queue on Redis Streams (the distributed shape): many gateways submit, many agent
workers claim with a consumer group, and a dead worker's tasks are taken over after the
visibility timeout (XAUTOCLAIM). Live workers heart-beat their claims so a long episode is not
taken over.

Keys under `{prefix}` (one Redis server, or a Redis Cluster with a `redis+cluster://` URL):
  {prefix}:{{prefix}}:active   LIST of running job ids: the ring claimers rotate over (fair share)
  {prefix}:{{prefix}}:credit   tasks the job at the ring's head may still give before it rotates
  {prefix}:{{prefix}}:bell     a short stream a submit rings, so idle workers wake at once
  {prefix}:{{prefix}}:jobs     ZSET of job ids by creation time (the job list)
  {prefix}:{{prefix}}:prio     HASH job -> priority of the jobs in the ring (claiming on a cluster)
  {prefix}:{job:<id>}:stream   one entry per task {key}; consumer group "workers"
  {prefix}:{job:<id>}:spec     JobSpec JSON      ...:tasks    HASH key -> TaskEnvelope JSON
  {prefix}:{job:<id>}:done     HASH key -> 1     ...:results  LIST of stored records
  {prefix}:{job:<id>}:stats    HASH total, done, o:<outcome>, rsum, rn, reclaimed, state, priority
  {prefix}:{job:<id>}:attempts HASH key -> claims so far
The hash tags put one job's keys in one slot and the global keys in another, so every script
touches one slot (rollgate.jobs.redis_scripts). The queued-task bound is the sum of the active
jobs' unrecorded tasks, read at submit: no global counter is written per task. A stream per job
lets workers serve concurrent jobs in weighted round-robin (by `priority`) instead of
first-in-first-out across jobs. A record is stored by one Lua script ("set if absent" on done,
then append): exactly one record per task, whatever the number of executions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rollgate.core.errors import CapacityError, NotFound, UpstreamError
from rollgate.core.redis_client import ScriptBatch, bounded_client, call, is_cluster_url
from rollgate.jobs import redis_scripts as lua
from rollgate.jobs.queue import (
    DEFAULT_MAX_ATTEMPTS,
    Claim,
    JobProgress,
    JobSpec,
    TaskEnvelope,
    cancelled_record,
    encode_record,
    progress_from,
)
from rollgate.jobs.redis_claim import Entry, claim_on_cluster, claim_on_server, prepare
from rollgate.jobs.redis_loss import REQUIRED, ReadLog, mark_lost, may_have_lost, persistence_problem, sweep_lost
from rollgate.jobs.redis_reclaim import RestartWatch, maybe_reclaim

log = logging.getLogger("rollgate.queue")

GROUP = "workers"


class RedisJobQueue:
    def __init__(
        self,
        url: str,
        *,
        prefix: str = "rollgate:q",
        max_queued_tasks: int = 100_000,
        visibility_timeout_s: float = 600.0,
        result_ttl_s: float = 7 * 24 * 3600.0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_connections: int = 64,
        pool_wait_s: float = 30.0,
        client: Any = None,
    ):
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"queue prefix {prefix!r} must not contain braces (they pick Redis Cluster hash slots)")
        self.prefix = prefix
        self.cluster = is_cluster_url(url) if client is None else type(client).__name__ == "RedisCluster"
        self.max_queued_tasks = max_queued_tasks
        self.visibility_timeout_s = visibility_timeout_s
        self.result_ttl_s = result_ttl_s
        self.max_attempts = max_attempts
        # socket_timeout must outlast the longest XREADGROUP BLOCK we issue (block_s <= 5).
        self._r = client or bounded_client(url, max_connections=max_connections, wait_s=pool_wait_s, socket_timeout=15)
        self._submit = self._r.register_script(lua.SUBMIT_JOB)
        self._admit = self._r.register_script(lua.ADMIT)
        # the per-task scripts of one loop turn (results, heartbeats, claims of many workers'
        # slots) share one pipeline: core/redis_client.ScriptBatch
        batch = ScriptBatch(self._r)
        self._complete = batch.wrap(self._r.register_script(lua.COMPLETE))
        self._touch = batch.wrap(self._r.register_script(lua.TOUCH))
        self._claim_script = batch.wrap(self._r.register_script(lua.CLAIM))
        self._ring = batch.wrap(self._r.register_script(lua.RING))
        self._leave = batch.wrap(self._r.register_script(lua.LEAVE))
        self._claim_job = batch.wrap(self._r.register_script(lua.CLAIM_JOB))
        self._specs: dict[str, JobSpec] = {}
        self._last_state: dict[str, str] = {}  # job -> the state this process last read
        self._priorities: dict[str, int] = {}  # job -> priority, for claiming on a cluster
        self._read = ReadLog()  # keys of the records read, for a rebuild after data loss
        self._watch = RestartWatch()  # claims lost with a restart (rollgate.jobs.redis_reclaim)

    # keys -----------------------------------------------------------------------------
    def _k(self, name: str) -> str:
        return f"{self.prefix}:{{{self.prefix}}}:{name}"

    def _jk(self, job_id: str, part: str) -> str:
        return f"{self.prefix}:{{job:{job_id}}}:{part}"

    async def _call(self, coro):
        try:
            return await call(coro, component="queue")
        except UpstreamError:
            self._watch.failed = True
            raise

    async def _spec(self, job_id: str) -> JobSpec:
        spec = self._specs.get(job_id)
        if spec is None:
            raw = await self._call(self._r.get(self._jk(job_id, "spec")))
            if raw is None:
                raise NotFound(f"unknown or expired rollout job {job_id!r}", component="gateway", field="job_id")
            spec = JobSpec.model_validate_json(raw)
            self._remember(spec)
        return spec

    def _remember(self, spec: JobSpec) -> None:
        if len(self._specs) > 10_000:
            self._specs.clear()
            self._last_state.clear()
        self._specs[spec.job_id] = spec

    async def _state(self, job_id: str, *, full: bool) -> tuple[Any, list[str]]:
        """-> (the stats hash, or its state field, and the required keys that are missing)."""
        async with self._r.pipeline(transaction=True) as pipe:  # one snapshot: no false alarm
            if full:
                pipe.hgetall(self._jk(job_id, "stats"))
            else:
                pipe.hget(self._jk(job_id, "stats"), "state")
            for part in REQUIRED:
                pipe.exists(self._jk(job_id, part))
            got = await self._call(pipe.execute())
        return got[0], [part for part, n in zip(REQUIRED, got[1:], strict=True) if not n]

    async def _lost(self, job_id: str, missing: list[str]) -> bool:
        """A job whose keys vanished while it ran is marked failed (rollgate.jobs.redis_loss)."""
        spec = self._specs.get(job_id)
        if not missing or spec is None or not may_have_lost(self, spec):
            return False
        await mark_lost(self, spec, missing)
        return True

    async def persistence_warning(self) -> str | None:
        """What a Redis crash would lose (the gateway logs it at start-up), or None."""
        return await persistence_problem(self._r)

    # producer side ----------------------------------------------------------------------
    async def submit(self, spec: JobSpec, tasks: list[TaskEnvelope]) -> None:
        # The bound is checked before the job's keys are written, not atomically with other
        # submits: gateways submitting at the same instant may pass it by one job each.
        queued = await self.queued()
        if queued + len(tasks) > self.max_queued_tasks:
            raise CapacityError(
                f"the job queue holds {queued} tasks; {len(tasks)} more would exceed the limit of "
                f"{self.max_queued_tasks} (gateway.max_queued_tasks); retry later",
                component="gateway",
                retry_after_s=5.0,
            )
        args: list[Any] = [len(tasks), spec.model_dump_json(), int(self.result_ttl_s), spec.priority]
        for t in tasks:
            args += [t.key, t.model_dump_json()]
        j = spec.job_id
        keys = [self._jk(j, "tasks"), self._jk(j, "spec"), self._jk(j, "stats"), self._jk(j, "stream")]
        await self._call(self._submit(keys=keys, args=args))
        # Listed and claimable only once all of its tasks are stored.
        admit = [self._k("jobs"), self._k("active"), self._k("bell"), self._k("prio")]
        await self._call(self._admit(keys=admit, args=[j, spec.created_at, spec.priority]))
        self._remember(spec)  # this gateway can then tell the job's loss from an unknown job

    # consumer side ----------------------------------------------------------------------
    async def claim(self, consumer: str, count: int, *, block_s: float = 1.0) -> list[Claim]:
        self._watch.consumers.add(consumer)
        await maybe_reclaim(self)
        bell, entries = await self._claim_round(consumer, count)
        if not entries and block_s > 0:
            # Nothing to do: sleep until a job is submitted (the bell rings) or block_s passes.
            # The bell id came from the same atomic script, so a submit in between is not missed.
            rang = await self._call(
                self._r.xread({self._k("bell"): bell}, count=1, block=max(1, int(min(block_s, 5.0) * 1000)))
            )
            if rang:
                _, entries = await self._claim_round(consumer, count)
        return await prepare(self, consumer, entries)

    async def _claim_round(self, consumer: str, count: int) -> tuple[bytes, list[Entry]]:
        if self.cluster:
            return await claim_on_cluster(self, consumer, count)
        return await claim_on_server(self, consumer, count)

    async def _leave_ring(self, job_id: str) -> None:
        await self._call(self._leave(keys=[self._k("active"), self._k("prio")], args=[job_id]))

    async def _ack(self, job_id: str, delivery_id: str) -> None:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.xack(self._jk(job_id, "stream"), GROUP, delivery_id)
            pipe.xdel(self._jk(job_id, "stream"), delivery_id)
            await self._call(pipe.execute())

    async def _touch_all(self, consumer: str, claims: list[Claim], idle_ms: int) -> None:
        by_job: dict[str, list[str]] = {}
        for c in claims:
            by_job.setdefault(c.task.job_id, []).append(c.delivery_id)
        await self._call(
            asyncio.gather(
                *[
                    self._touch(keys=[self._jk(job, "stream")], args=[consumer, idle_ms, *ids])
                    for job, ids in by_job.items()
                ]
            )
        )

    async def heartbeat(self, consumer: str, claims: list[Claim]) -> None:
        if claims:
            await self._touch_all(consumer, claims, 0)

    async def release(self, consumer: str, claims: list[Claim]) -> None:
        # Mark our entries idle for longer than the visibility timeout: the next XAUTOCLAIM of
        # any worker takes them at once.
        for c in claims:
            self._watch.done(c.task.job_id, c.delivery_id)
        if claims:
            await self._touch_all(consumer, claims, int(self.visibility_timeout_s * 1000) + 1000)
            await self._call(self._r.xadd(self._k("bell"), {"released": len(claims)}, maxlen=100, approximate=True))

    async def _store(self, job_id: str, key: str, record: dict[str, Any], delivery_id: str = "") -> bool:
        stored, label, reward = encode_record(record, key)
        pos, finished = await self._call(
            self._complete(
                keys=[
                    self._jk(job_id, "done"),
                    self._jk(job_id, "results"),
                    self._jk(job_id, "stats"),
                    self._jk(job_id, "stream"),
                ],
                args=[
                    key,
                    stored,
                    delivery_id,
                    label,
                    "" if reward is None else repr(reward),
                    int(self.result_ttl_s),
                    repr(time.time()),
                ],
            )
        )
        if finished:  # the ring is in another slot: a second call, once per job
            await self._leave_ring(job_id)
        return bool(pos)

    async def complete(self, claim: Claim, record: dict[str, Any]) -> bool:
        # Not run any more, stored or not: after a restart its entry is given back at once.
        self._watch.done(claim.task.job_id, claim.delivery_id)
        return await self._store(claim.task.job_id, claim.task.key, record, claim.delivery_id)

    # jobs -------------------------------------------------------------------------------
    async def cancel(self, job_id: str) -> JobProgress:
        spec = await self._spec(job_id)
        stats = self._jk(job_id, "stats")
        # Only a running job turns cancelled; a finished one keeps its state.
        await self._call(
            self._r.eval(
                "if redis.call('HGET', KEYS[1], 'state') == 'running' then "
                "redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', ARGV[1]) end return 1",
                1,
                stats,
                repr(time.time()),
            )
        )
        await self._leave_ring(job_id)
        keys = await self._call(self._r.hkeys(self._jk(job_id, "tasks")))
        done = set(await self._call(self._r.hkeys(self._jk(job_id, "done"))))
        missing = [k for k in keys if k not in done]
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            raws = await self._call(self._r.hmget(self._jk(job_id, "tasks"), chunk))
            await asyncio.gather(
                *[
                    self._store(job_id, k.decode(), cancelled_record(TaskEnvelope.model_validate_json(raw), spec))
                    for k, raw in zip(chunk, raws, strict=True)
                    if raw is not None
                ]
            )
        return await self.progress(job_id)

    async def cancelled(self, job_ids: list[str]) -> set[str]:
        if not job_ids:
            return set()
        async with self._r.pipeline(transaction=False) as pipe:
            for j in job_ids:
                pipe.hget(self._jk(j, "stats"), "state")
            states = await self._call(pipe.execute())
        return {j for j, s in zip(job_ids, states, strict=True) if s is None or s == b"cancelled"}

    async def progress(self, job_id: str) -> JobProgress:
        spec = await self._spec(job_id)
        raw, missing = await self._state(job_id, full=True)
        if raw.get(b"state", b"running") == b"running" and await self._lost(job_id, missing):
            raw = await self._call(self._r.hgetall(self._jk(job_id, "stats")))
        if not raw:
            raise NotFound(f"unknown or expired rollout job {job_id!r}", component="gateway", field="job_id")
        prog = self._progress(spec, raw)
        self._last_state[job_id] = prog.state
        if prog.finished:
            self._read.forget(job_id)
        return prog

    @staticmethod
    def _progress(spec: JobSpec, raw: dict[bytes, bytes]) -> JobProgress:
        s = {k.decode(): v.decode() for k, v in raw.items()}
        counts = {k[2:]: int(v) for k, v in s.items() if k.startswith("o:")}
        return progress_from(
            spec,
            s.get("state", "running"),
            int(s.get("done", 0)),
            counts,  # type: ignore[arg-type]
            float(s.get("rsum", 0.0)),
            int(s.get("rn", 0)),
            int(s.get("reclaimed", 0)),
            float(s["finished_at"]) if "finished_at" in s else None,
            s.get("error"),
        )

    async def list_jobs(self, limit: int = 100) -> list[JobProgress]:
        ids = [j.decode() for j in await self._call(self._r.zrevrange(self._k("jobs"), 0, limit - 1))]
        out: list[JobProgress] = []
        for j in ids:
            try:
                out.append(await self.progress(j))
            except NotFound:
                await self._call(self._r.zrem(self._k("jobs"), j))  # expired
        return out

    async def results(self, job_id: str, after: int, limit: int = 1000) -> list[bytes]:
        key = self._jk(job_id, "results")
        out = await self._call(self._r.lrange(key, after, after + limit - 1))
        if out and self._last_state.get(job_id) == "running":  # a reader of a running job
            while gap := self._read.gap(job_id, after):  # this process starts reading mid-stream
                have = after - gap
                chunk = await self._call(self._r.lrange(key, have, have + min(gap, 1000) - 1))
                if not chunk:
                    break
                self._read.note(job_id, have, chunk)
            self._read.note(job_id, after, out)
        return out

    async def sweep_lost(self) -> int:
        return await sweep_lost(self)

    async def wait_results(self, job_id: str, after: int, *, limit: int = 1000, timeout_s: float = 10.0) -> list[bytes]:
        # Polling with a short back-off: cheap at trainer scale (a few readers per job), and
        # no pub/sub connection to keep per reader.
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        while True:
            out = await self.results(job_id, after, limit)
            if out or time.monotonic() >= deadline:
                return out
            state, missing = await self._state(job_id, full=False)
            if state in (None, b"running") and await self._lost(job_id, missing):
                return await self.results(job_id, after, limit)
            if state is None:
                raise NotFound(f"unknown or expired rollout job {job_id!r}", component="gateway", field="job_id")
            if state != b"running":
                self._last_state[job_id] = state.decode()
                self._read.forget(job_id)
                return await self.results(job_id, after, limit)
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.25)

    async def queued(self) -> int:
        """Tasks submitted and not yet recorded: the active jobs' total - done."""
        jobs = await self._call(self._r.lrange(self._k("active"), 0, -1))
        if not jobs:
            return 0
        async with self._r.pipeline(transaction=False) as pipe:
            for j in jobs:
                pipe.hmget(self._jk(j.decode(), "stats"), "total", "done")
            got = await self._call(pipe.execute())
        return sum(max(0, int(t) - int(d)) for t, d in got if t is not None and d is not None)

    async def close(self) -> None:
        await self._r.aclose()

    async def clear(self) -> None:
        """Remove every key under this queue's prefix (tests)."""
        async for key in self._r.scan_iter(match=f"{self.prefix}:*", count=500):
            await self._r.delete(key)
