"""Concurrency scale: thousands of episodes open at once, each waiting on a slow model.

    python -m benchmarks.bench_concurrency                      # 1k, 5k, 10k concurrent episodes
    python -m benchmarks.bench_concurrency --levels 1000 --delay-s 5
    python -m benchmarks.bench_concurrency --levels 10000,50000 --delay-s 60    # issue 17's scale

Shape: a model server (the real model app and scripted backend behind a fixed `--delay-s` per
call, benchmarks.standins), `rollgate serve --role resources --env math`, and this process as the
agent worker holding every episode over HTTP. Each level starts all its episodes at once; while
they run, the RSS of every process is sampled. Reported per level: episodes waiting on the model
at the peak, failures, peak RSS per process, and the growth per session between levels.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import uvloop

from benchmarks import cli, common, stack
from benchmarks.bench_overhead import API_KEY, serve
from benchmarks.common import Proc, free_port, python_cmd

log = logging.getLogger("rollgate.bench")


class CountingModel:
    """Wraps a model client: how many calls are waiting on the model right now."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.waiting = 0

    async def create(self, request: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        self.waiting += 1
        try:
            return await self.inner.create(request, timeout_s=timeout_s)
        finally:
            self.waiting -= 1

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run_level(n: int, agent: Any, counter: CountingModel, pids: dict[str, int]) -> dict[str, Any]:
    peak_rss = {k: common.rss_mb(p) for k, p in pids.items()}
    peak_waiting = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak_waiting
        while not done.is_set():
            peak_waiting = max(peak_waiting, counter.waiting)
            for k, p in pids.items():
                peak_rss[k] = max(peak_rss[k], common.rss_mb(p))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    t0 = time.perf_counter()
    res = await stack.drive(agent, iter([stack.task_row(i) for i in range(n)]), n)
    wall = time.perf_counter() - t0
    done.set()
    await sampler
    failed = [t for t in res.trajectories if t.outcome.value != "completed" or t.reward != 1.0]
    errors: dict[str, int] = {}
    for t in failed:
        key = common.error_key(t.outcome.value, t.error.message if t.error else f"reward {t.reward}")
        errors[key] = errors.get(key, 0) + 1
    return {
        "episodes": n,
        "peak_waiting_on_model": peak_waiting,
        "failed": len(failed),
        "errors": errors,
        "wall_s": wall,
        "rollouts_per_s": n / wall,
        "p50_s": common.percentile(res.latencies_s, 50),
        "p99_s": common.percentile(res.latencies_s, 99),
        "peak_rss_mb": peak_rss,
        "peak_rss_total_mb": sum(peak_rss.values()),
    }


async def main_async(a: argparse.Namespace) -> int:
    fd_limit = common.raise_fd_limit(max(65536, 3 * max(a.levels) + 1024))  # children inherit it
    log_dir = Path(tempfile.mkdtemp(prefix="rollgate-bench-"))
    mport = free_port()
    model = Proc(
        "model",
        python_cmd("-m", "benchmarks.standins", "--port", str(mport), "--delay-s", str(a.delay_s)),
        mport,
        log_dir=log_dir,
    )
    resources = serve(
        "resources",
        "resources",
        log_dir,
        "--env",
        stack.ENV,
        env={"ROLLGATE_SESSIONS__CAPACITY": str(10 * max(a.levels))},
    )
    procs = [model.start(), resources.start()]
    rows = []
    try:
        settings = stack.agent_settings(
            model_timeout_s=a.delay_s + 120,
            episode_timeout_s=a.delay_s * 2 + 600,
            seed_timeout_s=120,
            tool_timeout_s=120,
            verify_timeout_s=120,
        )
        agent = stack.http_agent(
            model.url, resources.url, api_key=API_KEY, settings=settings, channel=a.transport == "channel"
        )
        counter = CountingModel(agent.model)
        agent.model = counter  # type: ignore[assignment]
        pids = {"agent": os.getpid(), "model": model.pid, "resources": resources.pid}
        baseline = {k: common.rss_mb(p) for k, p in pids.items()}
        for n in a.levels:
            row = await run_level(n, agent, counter, pids)
            rows.append(row)
            common.print_table(
                [{**row, **{f"rss_{k}_mb": v for k, v in row["peak_rss_mb"].items()}}],
                [
                    "episodes",
                    "peak_waiting_on_model",
                    "failed",
                    "wall_s",
                    "rollouts_per_s",
                    "p50_s",
                    "p99_s",
                    "rss_agent_mb",
                    "rss_model_mb",
                    "rss_resources_mb",
                    "peak_rss_total_mb",
                ],
                title=f"level {n}",
            )
        await stack.close_agent(agent)
    finally:
        for x in procs:
            x.stop()
    growth = []
    for lo, hi in pairwise(rows):
        dn = hi["peak_waiting_on_model"] - lo["peak_waiting_on_model"]
        if dn > 0:
            growth.append(
                {
                    "from": lo["episodes"],
                    "to": hi["episodes"],
                    "kb_per_session": {k: (hi["peak_rss_mb"][k] - lo["peak_rss_mb"][k]) * 1024 / dn for k in pids},
                    "kb_per_session_total": (hi["peak_rss_total_mb"] - lo["peak_rss_total_mb"]) * 1024 / dn,
                }
            )
    for g in growth:
        per = ", ".join(f"{k} {v:.1f}" for k, v in g["kb_per_session"].items())
        print(f"RSS growth {g['from']} -> {g['to']} sessions: {g['kb_per_session_total']:.1f} KB/session ({per})")
    path = common.write_results(
        "bench_concurrency",
        {
            "delay_s": a.delay_s,
            "fd_soft_limit": fd_limit,
            "baseline_rss_mb": baseline,
            "levels": rows,
            "growth": growth,
            "load_avg_at_end": os.getloadavg(),
        },
    )
    print(f"\nwritten: {path}")
    return 0


def main() -> int:
    ap = cli.parser(__doc__)
    ap.add_argument("--levels", default=[1000, 5000, 10000], type=cli.int_list)
    ap.add_argument(
        "--delay-s",
        type=cli.positive(),
        default=20.0,
        help="model latency per call; long enough that every episode of a level is open at once",
    )
    ap.add_argument(
        "--transport",
        choices=("channel", "http"),
        default="channel",
        help="agent -> servers: the multiplexed channel (a few sockets in all) or one HTTP request each",
    )
    return uvloop.run(main_async(cli.parse_for_servers(ap)))


if __name__ == "__main__":
    sys.exit(main())
