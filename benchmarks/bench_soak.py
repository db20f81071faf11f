"""Soak: many rollouts through the cluster shape, with the memory of every process over time.

    python -m benchmarks.bench_soak                        # 200,000 rollouts (~11 min at 300/s)
    python -m benchmarks.bench_soak --rollouts 20000 --sample-s 2

The processes are bench_cluster's (rollgate.core.topology's loopback shape: the model server on
the scripted backend, `--env-replicas` math resources servers, `--agents` agent workers, the
gateway) plus a Redis server of this run's own with an append-only file, as the shipped Redis
runs, so its memory is this run's alone. `--trainers` trainer loops in this process each submit
jobs of `--job-size` tasks one after another and read every record from the results stream, so
the workers always have a job to serve. Finished jobs expire from Redis after `--result-ttl-s`
(what a cluster's result TTL does over days, in minutes): a leak shows as growth that does not
level off, not as the records a job keeps until then.

A sampler thread reads the resident memory (VmRSS) of every process every `--sample-s` seconds.
The table gives it at the start (after a warm-up job), at the end and at its maximum, and the
growth over the second half of the run, where a process that holds steady grows by about 0; the
whole time series goes to benchmarks/results/bench_soak.json. Every job must yield exactly one
record per task: missing or duplicate records and error outcomes are counted and reported.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import uvloop

from benchmarks import cli, common, stack
from benchmarks.bench_cluster import API_KEY, Cluster, run_job
from devtools.processes import RedisProcess

log = logging.getLogger("rollgate.bench")


class Sampler(threading.Thread):
    """RSS of named processes every `every_s` seconds, with the rollouts done at that moment."""

    def __init__(self, pids: dict[str, int], every_s: float, done: list[int]):
        super().__init__(name="rss-sampler", daemon=True)
        self.pids = pids
        self.every_s = every_s
        self.done = done  # one shared counter cell, written by the trainer loops
        self.t0 = time.monotonic()
        self.samples: list[dict[str, Any]] = []
        self.stopped = threading.Event()

    def sample(self) -> dict[str, Any]:
        rss: dict[str, float | None] = {}
        for name, pid in self.pids.items():
            try:
                rss[name] = round(common.rss_mb(pid), 1)
            except OSError:  # the process is gone: the soak reports it
                rss[name] = None
        row = {"t_s": round(time.monotonic() - self.t0, 1), "rollouts": self.done[0], "rss_mb": rss}
        self.samples.append(row)
        return row

    def run(self) -> None:
        self.sample()  # idle, before any traffic
        while not self.stopped.wait(self.every_s):
            self.sample()

    def stop(self) -> None:
        self.stopped.set()
        self.join(self.every_s + 5)
        self.sample()  # the end point


class Tally:
    def __init__(self) -> None:
        self.jobs = 0
        self.records = 0
        self.missing = 0
        self.duplicates = 0
        self.outcomes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()


async def trainer(
    client: httpx.AsyncClient, a: argparse.Namespace, next_start: itertools.count, done: list[int], tally: Tally
) -> None:
    """Submit jobs one after another until the run's rollouts are taken; check every job's records."""
    while True:
        start = next(next_start) * a.job_size
        if start >= a.rollouts:
            return
        n = min(a.job_size, a.rollouts - start)
        rows = [stack.task_row(start + i, delay_s=a.delay_s) for i in range(n)]
        records, _progress, _first = await run_job(client, rows, a.job_timeout_s)
        keys = Counter(r["task"]["task_id"] for r in records if "task" in r)
        tally.jobs += 1
        tally.records += len(records)
        tally.duplicates += sum(c - 1 for c in keys.values())
        tally.missing += len({r["task_id"] for r in rows} - set(keys))
        for r in records:
            outcome = str(r.get("outcome", "failure"))
            tally.outcomes[outcome] += 1
            if r.get("error"):
                tally.errors[common.error_key(outcome, str(r["error"].get("message", "")))] += 1
        done[0] += len(records)


def summarize(samples: list[dict[str, Any]], warm_index: int) -> list[dict[str, Any]]:
    """Per process: RSS first (idle, before any traffic), at the start (after the warm-up job), at
    the end and at its max; growth over the second half (median of the last tenth of samples minus
    median of the tenth around the middle)."""
    rows = []
    names = list(samples[0]["rss_mb"])
    run = samples[warm_index:]
    tenth = max(1, len(run) // 10)
    mid = len(run) // 2
    for name in names:
        series = [s["rss_mb"][name] for s in run]
        if any(v is None for v in series):
            rows.append({"process": name, "note": "exited during the run"})
            continue
        middle = statistics.median(series[max(0, mid - tenth // 2) : mid + tenth // 2 + 1])
        last = statistics.median(series[-tenth:])
        rows.append(
            {
                "process": name,
                "first_mb": samples[0]["rss_mb"][name],
                "start_mb": series[0],
                "end_mb": series[-1],
                "max_mb": max(series),
                "growth_2nd_half_mb": round(last - middle, 1),
                "growth_2nd_half_pct": round(100 * (last - middle) / middle, 1) if middle else 0.0,
            }
        )
    return rows


COLUMNS = ["process", "first_mb", "start_mb", "end_mb", "max_mb", "growth_2nd_half_mb", "growth_2nd_half_pct"]


async def main_async(a: argparse.Namespace) -> int:
    common.raise_fd_limit()
    log_dir = Path(tempfile.mkdtemp(prefix="rollgate-bench-soak-"))
    redis = RedisProcess(common.free_port()) if not a.redis_url else None
    try:
        if redis:
            redis.start()
        url = a.redis_url or (redis.url if redis else "")
        extra = {"ROLLGATE_GATEWAY__RESULT_TTL_S": str(a.result_ttl_s)}
        per_agent = max(1, -(-a.concurrency // a.agents))
        with Cluster(
            url,
            agents=a.agents,
            per_agent_concurrency=per_agent,
            log_dir=log_dir,
            env_replicas=a.env_replicas,
            extra_env=extra,
        ) as cluster:
            pids = {p.name: p.pid for p in cluster.procs}
            if redis:
                pids["redis"] = redis.pid
            pids["trainer (this process)"] = os.getpid()
            done = [0]
            sampler = Sampler(pids, a.sample_s, done)
            sampler.start()
            tally = Tally()
            async with httpx.AsyncClient(
                base_url=cluster.gateway_url,
                limits=httpx.Limits(max_connections=4 * a.trainers),
                headers={"authorization": f"Bearer {API_KEY}"},
                timeout=httpx.Timeout(a.job_timeout_s, connect=10),
            ) as client:
                warm = [stack.task_row(10**9 + i, delay_s=a.delay_s) for i in range(min(a.job_size, 1000))]
                await run_job(client, warm, a.job_timeout_s)
                warm_index = len(sampler.samples)
                sampler.sample()
                t0 = time.perf_counter()
                counter = itertools.count()
                reporter = asyncio.create_task(report_progress(sampler, a.rollouts, t0))
                try:
                    await asyncio.gather(*(trainer(client, a, counter, done, tally) for _ in range(a.trainers)))
                finally:
                    reporter.cancel()
                wall = time.perf_counter() - t0
            sampler.stop()
    finally:
        if redis:
            redis.close()
    table = summarize(sampler.samples, warm_index)
    failed = tally.missing + tally.duplicates + sum(v for k, v in tally.outcomes.items() if k != "completed")
    print(
        f"\n{tally.records:,} records of {a.rollouts:,} rollouts in {tally.jobs} jobs, {wall:,.0f} s "
        f"({tally.records / wall:,.0f} rollouts/s); missing {tally.missing}, duplicates {tally.duplicates}; "
        f"outcomes {dict(tally.outcomes)}"
    )
    for key, n in tally.errors.most_common(5):
        print(f"  {n} x {key}")
    common.print_table(table, COLUMNS, title=f"RSS (MB) per process, sampled every {a.sample_s:g} s")
    path = common.write_results(
        "bench_soak",
        {
            "rollouts": a.rollouts,
            "records": tally.records,
            "jobs": tally.jobs,
            "job_size": a.job_size,
            "trainers": a.trainers,
            "agents": a.agents,
            "env_replicas": a.env_replicas,
            "concurrency": a.concurrency,
            "model_delay_s_per_turn": a.delay_s,
            "result_ttl_s": a.result_ttl_s,
            "redis": "own redis-server, appendonly yes" if redis else "external (its memory is not sampled)",
            "wall_s": round(wall, 1),
            "rollouts_per_s": round(tally.records / wall, 1),
            "missing": tally.missing,
            "duplicates": tally.duplicates,
            "failed": failed,
            "outcomes": dict(tally.outcomes),
            "errors": dict(tally.errors),
            "rss": table,
            "warm_up_samples": warm_index,
            "samples": sampler.samples,
        },
    )
    print(f"\nwritten: {path} (server logs: {log_dir})")
    return 0 if failed == 0 else 1


async def report_progress(sampler: Sampler, total: int, t0: float, every_s: float = 30.0) -> None:
    while True:
        await asyncio.sleep(every_s)
        last = sampler.samples[-1] if sampler.samples else {"rss_mb": {}}
        rate = sampler.done[0] / max(1e-9, time.perf_counter() - t0)
        rss = ", ".join(f"{k.split(' ')[0]} {v}" for k, v in last["rss_mb"].items())
        print(f"{sampler.done[0]:,}/{total:,} rollouts ({rate:,.0f}/s); RSS MB: {rss}", flush=True)


def main() -> int:
    ap = cli.parser(__doc__)
    ap.add_argument("--rollouts", type=cli.COUNT, default=200_000, help="rollouts in all, after the warm-up job")
    ap.add_argument("--job-size", type=cli.COUNT, default=2000, help="tasks per job")
    ap.add_argument("--trainers", type=cli.COUNT, default=2, help="trainer loops, each with one job at a time")
    ap.add_argument("--concurrency", type=cli.COUNT, default=64, help="episodes in flight over all agent workers")
    ap.add_argument("--agents", type=cli.COUNT, default=2, help="agent worker processes")
    ap.add_argument("--env-replicas", type=cli.COUNT, default=1, help="math resources server processes")
    ap.add_argument("--delay-s", type=cli.at_least(0, float), default=0.0, help="the scripted model's latency per turn")
    ap.add_argument("--sample-s", type=cli.positive(), default=5.0, help="seconds between RSS samples")
    ap.add_argument(
        "--result-ttl-s", type=cli.at_least(10, float), default=120.0, help="how long finished jobs stay in Redis"
    )
    ap.add_argument("--job-timeout-s", type=cli.positive(), default=900.0, help="give up on a job after this long")
    cli.add_redis_url(ap, "an external Redis instead of this run's own (its memory is then not sampled)", default="")
    return uvloop.run(main_async(cli.parse_for_servers(ap)))


if __name__ == "__main__":
    sys.exit(main())
