"""Full cluster: rollout jobs through the gateway and its Redis Streams job queue, run by agent
worker processes, with the model server and the resources server as their own processes.

    python -m benchmarks.bench_cluster                         # concurrency 64 and 256, 3 repeats
    python -m benchmarks.bench_cluster --concurrency 64 --tasks 1000 --agents 2

The processes are exactly those of rollgate.core.topology's loopback shape (what compose.yaml and
the e2e tests run): `rollgate serve --role model` (scripted backend), `--role resources --env
math`, `--agents` x `--role agent` (queue consumers) and `--role gateway`, all on loopback, with
the real Redis holding sessions and the job queue (a fresh queue prefix per cluster start). This
process plays the trainer: it POSTs one job of `--tasks` rows to /v1/rollouts and streams the
records from /v1/rollouts/{job}/results?wait=true. rollouts/s is end to end, from the submit to the
last record; CPU is summed over every server process, Redis included (this trainer process is
reported beside it, not in the sum).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import httpx
import redis
import uvloop

from benchmarks import cli, common, stack
from benchmarks.bench_overhead import cpu_by_process, cpu_delta, median_rows, redis_server_pid
from benchmarks.common import Proc, free_port, percentile, rollgate_cmd
from rollgate.core import jsonutil
from rollgate.core.topology import loopback_topology

log = logging.getLogger("rollgate.bench")
API_KEY = "bench-" + os.urandom(8).hex()


class Cluster:
    """The topology's processes on loopback for one agent concurrency, started and always stopped."""

    def __init__(
        self,
        redis_url: str,
        *,
        agents: int,
        per_agent_concurrency: int,
        log_dir: Path,
        env_replicas: int = 1,
        extra_env: dict[str, str] | None = None,
    ):
        ports: dict[tuple[str, int], int] = {}
        self.redis_url = redis_url
        self.prefix = f"rgbench:{uuid.uuid4().hex[:12]}:q"  # fresh per start: no collision with others
        specs = loopback_topology(
            [stack.ENV],
            redis_url=redis_url,
            api_key=API_KEY,
            agent_replicas=agents,
            env_replicas=env_replicas,
            model_backend="scripted",
            agent_concurrency=per_agent_concurrency,
            port_of=lambda name, i: ports.setdefault((name, i), free_port()),
        )
        extra = {
            "ROLLGATE_LOG_LEVEL": "WARNING",
            "ROLLGATE_GATEWAY__QUEUE_PREFIX": self.prefix,
            "ROLLGATE_GATEWAY__UI": "false",
            "ROLLGATE_MODEL__MODEL_PATH": "",
            "ROLLGATE_MODEL__SERVED_NAME": "scripted",
            # the scripted policy needs 2 turns; budgets must never be what ends an episode here
            "ROLLGATE_AGENT__MAX_TURNS": "64",
            "ROLLGATE_AGENT__MAX_OUTPUT_TOKENS": "1000000",
            **(extra_env or {}),
        }
        self.procs = [
            Proc(
                f"{s.name}-{i}" if s.replicas > 1 else s.name,
                rollgate_cmd(*s.command(i)),
                s.replica_ports[i],
                env={**s.env, **extra},
                log_dir=log_dir,
            )
            for s in specs
            for i in range(s.replicas)
        ]
        self.gateway_url = next(p.url for p in self.procs if p.name == "gateway")

    def __enter__(self) -> Self:
        try:
            # no part calls another while starting, so all start at once (imports dominate)
            with ThreadPoolExecutor(max_workers=len(self.procs)) as pool:
                for fut in [pool.submit(p.start, 120) for p in self.procs]:
                    fut.result()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.stop()
        r = redis.Redis.from_url(self.redis_url)
        try:
            for key in r.scan_iter(match=f"{self.prefix}:*", count=500):
                r.delete(key)
        finally:
            r.close()

    def pids(self) -> dict[str, int]:
        out = {p.name: p.pid for p in self.procs}
        rpid = redis_server_pid()
        if rpid:
            out["redis"] = rpid
        return out


async def run_job(client: httpx.AsyncClient, rows: list[dict[str, Any]], timeout_s: float) -> tuple[list, dict, float]:
    """Submit one job and read every record; returns (records, final progress, s to first record)."""
    t0 = time.perf_counter()
    resp = await client.post("/v1/rollouts", json={"tasks": rows, "env": stack.ENV, "policy_version": "bench"})
    if resp.status_code != 201:
        raise RuntimeError(f"submit failed: {resp.status_code} {resp.text[:500]}")
    job_id = resp.json()["job_id"]
    records: list[dict[str, Any]] = []
    first = float("nan")
    cursor: str | None = None
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:  # the stream can end early (server timeout): resume by cursor
        params = {"wait": "true", **({"cursor": cursor} if cursor else {})}
        async with client.stream("GET", f"/v1/rollouts/{job_id}/results", params=params) as stream:
            async for raw in stream.aiter_lines():
                if not raw:
                    continue
                line = jsonutil.loads(raw)
                cursor = line.get("cursor", cursor)
                if line["type"] == "end":
                    return records, line["progress"], first
                if line["type"] in ("trajectory", "failure"):
                    if not records:
                        first = time.perf_counter() - t0
                    records.append(line["record"])
    raise RuntimeError(f"job {job_id} unfinished after {timeout_s:g}s: {len(records)}/{len(rows)} records")


def summarize(
    conc: int,
    agents: int,
    records: list[dict[str, Any]],
    n_tasks: int,
    wall_s: float,
    first_s: float,
    cpu: dict[str, float],
    trainer_cpu_s: float,
) -> dict[str, Any]:
    n = len(records)
    ok = sum(1 for r in records if r.get("outcome") == "completed" and r.get("reward") == 1.0)
    errors: dict[str, int] = {}
    for r in records:
        if r.get("error"):
            key = common.error_key(str(r.get("outcome")), str(r["error"].get("message", "")))
            errors[key] = errors.get(key, 0) + 1
    episode = [r["timings"]["total_s"] for r in records if r.get("timings")]
    cpu_s = sum(cpu.values())
    return {
        "shape": "cluster",
        "concurrency": conc,
        "agents": agents,
        "rollouts": n,
        # a missing record is a failure too: every submitted task must yield exactly one
        "failed": (n_tasks - n) + (n - ok),
        "errors": errors,
        "rollouts_per_s": n / wall_s,
        "wall_s": wall_s,
        "first_record_s": first_s,
        "cpu_ms_per_rollout": cpu_s / max(1, n) * 1000,
        "cpu_ms_per_rollout_by_process": {k: v / max(1, n) * 1000 for k, v in cpu.items()},
        "trainer_cpu_ms_per_rollout": trainer_cpu_s / max(1, n) * 1000,
        "episode_p50_ms": percentile(episode, 50) * 1000,
        "episode_p99_ms": percentile(episode, 99) * 1000,
    }


async def measure_level(a: argparse.Namespace, conc: int, log_dir: Path) -> list[dict[str, Any]]:
    """One cluster start per level (the worker concurrency is a start-time setting): a warm-up job,
    then `--repeats` measured jobs."""
    per_agent = max(1, -(-conc // a.agents))  # the level split over the workers, rounded up
    out = []
    with Cluster(a.redis_url, agents=a.agents, per_agent_concurrency=per_agent, log_dir=log_dir) as cluster:
        pids = cluster.pids()
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(
            base_url=cluster.gateway_url,
            limits=limits,
            headers={"authorization": f"Bearer {API_KEY}"},
            timeout=httpx.Timeout(a.timeout_s, connect=5),
        ) as client:
            await run_job(client, [stack.task_row(10**8 + i) for i in range(max(2 * conc, 200))], a.timeout_s)
            for rep in range(a.repeats):
                rows = [stack.task_row(rep * a.tasks + i) for i in range(a.tasks)]
                load = os.getloadavg()[0]
                cpu0, me0 = cpu_by_process(pids), common.cpu_seconds(os.getpid())
                t0 = time.perf_counter()
                records, progress, first = await run_job(client, rows, a.timeout_s)
                wall = time.perf_counter() - t0
                row = summarize(
                    conc,
                    a.agents,
                    records,
                    a.tasks,
                    wall,
                    first,
                    cpu_delta(cpu0, pids),
                    common.cpu_seconds(os.getpid()) - me0,
                )
                row["load_avg"] = load
                row["reclaimed"] = progress.get("reclaimed")
                out.append(row)
                common.print_table(
                    [row], COLUMNS, title=f"concurrency {conc}, run {rep + 1}/{a.repeats} (load avg {load:.2f})"
                )
    return out


COLUMNS = [
    "shape",
    "concurrency",
    "agents",
    "rollouts",
    "failed",
    "rollouts_per_s",
    "cpu_ms_per_rollout",
    "trainer_cpu_ms_per_rollout",
    "first_record_s",
    "episode_p50_ms",
    "episode_p99_ms",
]


async def main_async(a: argparse.Namespace) -> int:
    common.raise_fd_limit()
    log_dir = Path(tempfile.mkdtemp(prefix="rollgate-bench-cluster-"))
    runs: list[dict[str, Any]] = []
    for conc in a.concurrency:
        runs += await measure_level(a, conc, log_dir)
    table = median_rows([[r] for r in runs])
    common.print_table(
        table,
        [*COLUMNS[:6], "rps_min", "rps_max", *COLUMNS[6:]],
        title=f"median of {a.repeats} jobs of {a.tasks} tasks",
    )
    for r in table:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_ms_per_rollout_by_process"].items())
        print(f"CPU ms/rollout by process at concurrency {r['concurrency']}: {parts}")
    path = common.write_results(
        "bench_cluster",
        {
            "parts": {
                "model": "model service, scripted backend (no tokenizer)",
                "env": "math (calculator tool)",
                "queue": "Redis Streams (gateway role)",
                "sessions": "redis",
            },
            "tasks_per_job": a.tasks,
            "repeats": a.repeats,
            "agents": a.agents,
            "agent_concurrency": "the level split over the agent workers (ROLLGATE_AGENT__CONCURRENCY each)",
            "median": table,
            "runs": runs,
            "logs": "per process, in a temporary folder",
        },
    )
    print(f"\nwritten: {path} (server logs: {log_dir})")
    return 0


def main() -> int:
    ap = cli.parser(__doc__)
    ap.add_argument(
        "--concurrency", type=cli.int_list, default=[64, 256], help="episodes in flight over all agent workers"
    )
    ap.add_argument("--tasks", type=cli.COUNT, default=2000, help="tasks per measured job")
    ap.add_argument("--repeats", type=cli.COUNT, default=3)
    ap.add_argument("--agents", type=cli.COUNT, default=1, help="agent worker processes (the level is split over them)")
    ap.add_argument("--timeout-s", type=cli.positive(), default=600.0, help="give up on a job after this long")
    cli.add_redis_url(ap, "Redis for sessions and the job queue (required: the gateway role needs it)")
    a = cli.parse_for_servers(ap)
    if not a.redis_url:
        ap.error("--redis-url: the gateway's job queue needs Redis")
    return uvloop.run(main_async(a))


if __name__ == "__main__":
    sys.exit(main())
