"""The Redis job queue alone on one Redis server and on a Redis Cluster, same run, alternating:

    python -m benchmarks.bench_queue_cluster                     # 4,000 tasks, 3 rounds each
    python -m benchmarks.bench_queue_cluster --tasks 20000 --workers 8 --concurrency 64

Both run on this machine's loopback: a redis-server without persistence of the benchmark's own
(the single shape) and a cluster of six (three primaries, three replicas, no persistence:
rollgate.core.redis_cluster_procs). Each round submits one job of `--tasks` tasks and lets
`--workers` claimers (coroutines of this process, each with its own queue object, as worker
processes have) claim up to `--concurrency` tasks at a time and complete each at once with a
small record: what is measured is the queue's submit, claim and complete paths (tasks/s, end to
end from the submit to the last record) and the CPU they cost Redis, not episodes.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
import uuid

from benchmarks import cli, common
from benchmarks.common import free_port
from devtools.processes import RedisProcess
from rollgate.core.redis_cluster_procs import RedisClusterProcesses
from rollgate.jobs.queue import JobSpec, TaskEnvelope
from rollgate.jobs.redis import RedisJobQueue

log = logging.getLogger("rollgate.bench")


def job(n: int) -> tuple[JobSpec, list[TaskEnvelope]]:
    job_id = f"job_{uuid.uuid4().hex[:10]}"
    row = {"responses_create_params": {"input": "What is 6*7?"}, "expected_answer": "42"}
    tasks = [
        TaskEnvelope(job_id=job_id, key=f"{i}.0", index=i, group_id=f"g{i}", task_id=f"t{i}", row=row, env="math")
        for i in range(n)
    ]
    return JobSpec(job_id=job_id, num_tasks=n, num_rows=n, model="bench"), tasks


async def consume(q: RedisJobQueue, name: str, concurrency: int, job_id: str) -> None:
    record = {"outcome": "completed", "reward": 1.0, "job_id": job_id, "turns": [], "messages": []}
    while True:
        claims = await q.claim(name, concurrency, block_s=0.05)
        if not claims:
            if (await q.progress(job_id)).finished:
                return
            continue
        await asyncio.gather(*[q.complete(c, record) for c in claims])


async def one_round(url: str, tasks: int, workers: int, concurrency: int) -> float:
    prefix = f"rgbench:{uuid.uuid4().hex[:8]}"
    queues = [RedisJobQueue(url, prefix=prefix, max_queued_tasks=10 * tasks) for _ in range(workers + 1)]
    try:
        spec, envelopes = job(tasks)
        started = time.perf_counter()
        await queues[0].submit(spec, envelopes)
        await asyncio.gather(*[consume(q, f"w{i}", concurrency, spec.job_id) for i, q in enumerate(queues[1:])])
        elapsed = time.perf_counter() - started
        assert (await queues[0].progress(spec.job_id)).done == tasks
        return tasks / elapsed
    finally:
        await queues[0].clear()
        for q in queues:
            await q.close()


def redis_cpu(pids: list[int]) -> float:
    return common.total_cpu_seconds(pids)


def main() -> None:
    ap = cli.parser(__doc__, whole_doc=True)
    ap.add_argument("--tasks", type=cli.COUNT, default=4000)
    ap.add_argument("--rounds", type=cli.COUNT, default=3)
    ap.add_argument("--workers", type=cli.COUNT, default=4, help="claimers, each with its own queue object")
    ap.add_argument("--concurrency", type=cli.COUNT, default=32, help="tasks each claimer takes at a time")
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    single = RedisProcess(free_port(), persist=False).start()
    cluster = RedisClusterProcesses().start()
    shapes = {"single": (single.url, [single.pid]), "cluster": (cluster.url, [p.pid for p in cluster.procs.values()])}
    got: dict[str, list[tuple[float, float]]] = {s: [] for s in shapes}
    try:
        for _ in range(a.rounds):
            for shape, (url, pids) in shapes.items():  # alternating, so drift hits both alike
                cpu0 = redis_cpu(pids)
                rate = asyncio.run(one_round(url, a.tasks, a.workers, a.concurrency))
                got[shape].append((rate, (redis_cpu(pids) - cpu0) * 1000 / a.tasks))
    finally:
        cluster.close()
        single.close()
    rows = [
        {
            "shape": shape,
            "tasks": a.tasks,
            "tasks_per_s": statistics.median(r for r, _ in runs),
            "min": min(r for r, _ in runs),
            "max": max(r for r, _ in runs),
            "redis_cpu_ms_per_task": statistics.median(c for _, c in runs),
        }
        for shape, runs in got.items()
    ]
    cols = ["shape", "tasks", "tasks_per_s", "min", "max", "redis_cpu_ms_per_task"]
    common.print_table(rows, cols, title=f"median of {a.rounds} rounds, alternating")
    ratio = rows[1]["tasks_per_s"] / rows[0]["tasks_per_s"]
    print(f"cluster / single: {ratio:.2f}")
    path = common.write_results("bench_queue_cluster", {"args": vars(a), "rows": rows, "cluster_over_single": ratio})
    print(f"written: {path}")


if __name__ == "__main__":
    main()
