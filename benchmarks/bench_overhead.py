"""Framework overhead: rollouts/s, CPU per rollout and per-hop latency when the model answers
instantly, for the embedded shape, the distributed shape and a naive baseline stack.

    python -m benchmarks.bench_overhead                       # all shapes, concurrency 1 64 256 1024
    python -m benchmarks.bench_overhead --shapes embedded --concurrency 64 --seconds 3

Every episode: seed, model (a calculator call), tool, model (final answer), verify, close.
Each configuration runs for `--seconds` (after a warm-up), `--repeats` times; the table shows
the median and the result file every run. CPU is summed over every process of the shape.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvloop

from benchmarks import cli, common, stack
from benchmarks.common import Proc, free_port, percentile, python_cmd, rollgate_cmd
from rollgate.agent_server.agent import Agent

log = logging.getLogger("rollgate.bench")
HOPS = ("seed", "model", "tool", "verify")


def rows_until(deadline: float, start: int = 0) -> Iterator[dict[str, Any]]:
    i = start
    while time.perf_counter() < deadline:
        yield stack.task_row(i)
        i += 1


def summarize(shape: str, conc: int, res: stack.RunResult, cpu: dict[str, float]) -> dict[str, Any]:
    cpu_s = sum(cpu.values())
    trajs = res.trajectories
    n = len(trajs)
    ok = sum(1 for t in trajs if t.outcome.value == "completed" and t.reward == 1.0)
    hops: dict[str, list[float]] = {h: [] for h in HOPS}
    for t in trajs:
        hops["seed"].append(t.timings.seed_s)
        hops["model"].append(t.timings.model_s / max(1, t.metrics.get("turns", 1)))  # per call
        hops["tool"].append(t.timings.tools_s)
        hops["verify"].append(t.timings.verify_s)
    errors: dict[str, int] = {}
    for t in trajs:
        if t.error is not None:
            key = common.error_key(t.outcome.value, t.error.message)
            errors[key] = errors.get(key, 0) + 1
    row: dict[str, Any] = {
        "shape": shape,
        "concurrency": conc,
        "rollouts": n,
        "failed": n - ok,
        "errors": errors,
        "rollouts_per_s": n / res.wall_s,
        "cpu_ms_per_rollout": cpu_s / max(1, n) * 1000,
        "p50_ms": percentile(res.latencies_s, 50) * 1000,
        "p99_ms": percentile(res.latencies_s, 99) * 1000,
        "cpu_ms_per_rollout_by_process": {k: v / max(1, n) * 1000 for k, v in cpu.items()},
    }
    for h in HOPS:
        row[f"{h}_p50_ms"] = percentile(hops[h], 50) * 1000
        row[f"{h}_p99_ms"] = percentile(hops[h], 99) * 1000
    return row


def cpu_by_process(pids: dict[str, int]) -> dict[str, float]:
    return {name: common.cpu_seconds(pid) for name, pid in pids.items()}


def cpu_delta(before: dict[str, float], pids: dict[str, int]) -> dict[str, float]:
    after = cpu_by_process(pids)
    return {k: after[k] - before[k] for k in pids}


async def measure(agent: Agent, shape: str, conc: int, seconds: float, pids: dict[str, int]) -> dict[str, Any]:
    warm = time.perf_counter() + min(1.0, seconds / 3)
    await stack.drive(agent, rows_until(warm, 10**8), conc)
    cpu0 = cpu_by_process(pids)
    res = await stack.drive(agent, rows_until(time.perf_counter() + seconds), conc)
    return summarize(shape, conc, res, cpu_delta(cpu0, pids))


# --- shapes -------------------------------------------------------------------------------------
async def embedded(concs: list[int], seconds: float) -> list[dict[str, Any]]:
    agent = stack.embedded_agent()
    return [await measure(agent, "embedded", c, seconds, {"all": os.getpid()}) for c in concs]


def redis_server_pid() -> int | None:
    """Redis's CPU belongs to the distributed shape's cost (it holds the sessions)."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if Path(f"/proc/{d}/comm").read_text().strip() == "redis-server":
                    return int(d)
            except OSError:
                continue
    return None


API_KEY = "bench-" + os.urandom(8).hex()


def serve(name: str, role: str, log_dir: Path, *extra: str, env: dict[str, str] | None = None) -> Proc:
    port = free_port()
    base_env = {
        "ROLLGATE_API_KEY": API_KEY,
        "ROLLGATE_LOG_LEVEL": "WARNING",
        "ROLLGATE_MODEL__BACKEND": "scripted",
        "ROLLGATE_MODEL__MODEL_PATH": "",
        "ROLLGATE_MODEL__SERVED_NAME": "scripted",
    }
    return Proc(
        name,
        rollgate_cmd("serve", "--role", role, "--port", str(port), *extra),
        port,
        env={**base_env, **(env or {})},
        log_dir=log_dir,
    )


async def distributed(concs: list[int], seconds: float, redis_url: str | None, log_dir: Path) -> list[dict[str, Any]]:
    """Separate processes on loopback: `rollgate serve --role model` (scripted backend),
    `rollgate serve --role resources --env math` (sessions in Redis when given), and this
    process as the agent worker, calling both over HTTP with Rollgate's clients."""
    extra = ("--redis-url", redis_url) if redis_url else ()
    model = serve("model", "model", log_dir)
    resources = serve("resources", "resources", log_dir, "--env", stack.ENV, *extra)
    procs = [model.start(), resources.start()]
    try:
        agent = stack.http_agent(model.url, resources.url, api_key=API_KEY)
        pids = {"agent": os.getpid(), **{x.name: x.pid for x in procs}}
        rpid = redis_server_pid() if redis_url else None
        if rpid:
            pids["redis"] = rpid
        out = [await measure(agent, "distributed", c, seconds, pids) for c in concs]
        await stack.close_agent(agent)
        return out
    finally:
        for x in procs:
            x.stop()


async def naive(concs: list[int], seconds: float, log_dir: Path) -> list[dict[str, Any]]:
    ports = {r: free_port() for r in ("backend", "model", "resources", "agent")}
    url = {r: f"http://127.0.0.1:{port}" for r, port in ports.items()}
    mod = ["-m", "benchmarks.baseline_naive_stack"]
    procs = [
        Proc(
            "naive-backend",
            python_cmd(*mod, "--role", "backend", "--port", str(ports["backend"])),
            ports["backend"],
            log_dir=log_dir,
        ),
        Proc(
            "naive-model",
            python_cmd(*mod, "--role", "model", "--port", str(ports["model"]), "--backend", url["backend"]),
            ports["model"],
            log_dir=log_dir,
        ),
        Proc(
            "naive-resources",
            python_cmd(*mod, "--role", "resources", "--port", str(ports["resources"])),
            ports["resources"],
            log_dir=log_dir,
        ),
        Proc(
            "naive-agent",
            python_cmd(
                *mod,
                "--role",
                "agent",
                "--port",
                str(ports["agent"]),
                "--resources",
                url["resources"],
                "--model",
                url["model"],
            ),
            ports["agent"],
            log_dir=log_dir,
        ),
    ]
    for x in procs:
        x.start()
    pids = {"driver": os.getpid(), **{x.name: x.pid for x in procs}}
    out = []
    try:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            for c in concs:
                out.append(await _naive_measure(client, url["agent"], c, seconds, pids))
    finally:
        for x in procs:
            x.stop()
    return out


async def _naive_measure(
    client: httpx.AsyncClient, agent_url: str, conc: int, seconds: float, pids: dict[str, int]
) -> dict[str, Any]:
    async def go(deadline: float, lat: list[float], fails: list[int]) -> None:
        async def worker() -> None:
            for row in rows_until(deadline):
                t = time.perf_counter()
                try:
                    r = await client.post(f"{agent_url}/run", json=row)
                    good = r.status_code == 200 and r.json()["reward"] == 1.0
                except httpx.HTTPError:
                    good = False
                lat.append(time.perf_counter() - t)
                fails.append(0 if good else 1)

        await asyncio.gather(*(worker() for _ in range(conc)))

    await go(time.perf_counter() + min(1.0, seconds / 3), [], [])
    lat: list[float] = []
    fails: list[int] = []
    cpu0 = cpu_by_process(pids)
    t0 = time.perf_counter()
    await go(t0 + seconds, lat, fails)
    wall = time.perf_counter() - t0
    by_proc = cpu_delta(cpu0, pids)
    cpu = sum(by_proc.values())
    n = len(lat)
    return {
        "shape": "naive",
        "concurrency": conc,
        "rollouts": n,
        "failed": sum(fails),
        "rollouts_per_s": n / wall,
        "cpu_ms_per_rollout": cpu / max(1, n) * 1000,
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "cpu_ms_per_rollout_by_process": {k: v / max(1, n) * 1000 for k, v in by_proc.items()},
    }


# --- main ---------------------------------------------------------------------------------------
COLUMNS = [
    "shape",
    "concurrency",
    "rollouts",
    "failed",
    "rollouts_per_s",
    "cpu_ms_per_rollout",
    "p50_ms",
    "p99_ms",
    "seed_p50_ms",
    "model_p50_ms",
    "tool_p50_ms",
    "verify_p50_ms",
    "model_p99_ms",
    "tool_p99_ms",
]


def median_rows(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per (shape, concurrency): the run with the median rollouts/s, plus the spread."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        for r in run:
            groups.setdefault((r["shape"], r["concurrency"]), []).append(r)
    out = []
    for rs in groups.values():
        rs = sorted(rs, key=lambda r: r["rollouts_per_s"])
        med = dict(rs[len(rs) // 2])
        med["rps_min"], med["rps_max"] = rs[0]["rollouts_per_s"], rs[-1]["rollouts_per_s"]
        out.append(med)
    return out


async def main_async(a: argparse.Namespace) -> int:
    concs = a.concurrency
    shapes = a.shapes.split(",")
    common.raise_fd_limit()
    log_dir = Path(tempfile.mkdtemp(prefix="rollgate-bench-"))
    runs: list[list[dict[str, Any]]] = []
    loads = []
    for rep in range(a.repeats):
        loads.append(os.getloadavg()[0])
        run: list[dict[str, Any]] = []
        if "embedded" in shapes:
            run += await embedded(concs, a.seconds)
        if "distributed" in shapes:
            run += await distributed(concs, a.seconds, a.redis_url or None, log_dir)
        if "naive" in shapes:
            run += await naive(concs, a.seconds, log_dir)
        runs.append(run)
        common.print_table(run, COLUMNS, title=f"run {rep + 1}/{a.repeats} (load avg {loads[-1]:.2f})")
    table = median_rows(runs)
    common.print_table(table, [*COLUMNS[:5], "rps_min", "rps_max", *COLUMNS[5:]], title=f"median of {a.repeats} runs")
    ratios = _ratios(table)
    for line in ratios:
        print(line)
    path = common.write_results(
        "bench_overhead",
        {
            "parts": {"model": "model service, scripted backend (no tokenizer)", "env": "math (calculator tool)"},
            "seconds_per_config": a.seconds,
            "repeats": a.repeats,
            "load_avg_per_repeat": loads,
            "distributed_sessions": "redis" if a.redis_url else "memory",
            "median": table,
            "runs": runs,
            "ratios": ratios,
        },
    )
    print(f"\nwritten: {path}")
    return 0


def _ratios(table: list[dict[str, Any]]) -> list[str]:
    by = {(r["shape"], r["concurrency"]): r for r in table}
    lines = []
    for (shape, c), r in sorted(by.items()):
        base = by.get(("naive", c))
        if shape != "naive" and base and base["rollouts_per_s"] > 0:
            lines.append(
                f"{shape} at concurrency {c}: {r['rollouts_per_s'] / base['rollouts_per_s']:.1f}x the "
                f"naive stack's rollouts/s, {base['cpu_ms_per_rollout'] / r['cpu_ms_per_rollout']:.1f}x "
                f"less CPU per rollout"
            )
    return lines


def main() -> int:
    ap = cli.parser(__doc__)
    ap.add_argument("--shapes", default="embedded,distributed,naive")
    ap.add_argument("--concurrency", type=cli.int_list, default=[1, 64, 256, 1024])
    ap.add_argument("--seconds", type=cli.positive(), default=5.0, help="measured time per configuration")
    ap.add_argument("--repeats", type=cli.COUNT, default=3)
    cli.add_redis_url(ap, "sessions of the distributed shape ('' for in-memory sessions)")
    return uvloop.run(main_async(cli.parse_for_servers(ap)))


if __name__ == "__main__":
    sys.exit(main())
