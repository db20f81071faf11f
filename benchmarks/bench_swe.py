"""The swe family's costs on the local sandbox, per project, without and with the warm pool
(sandboxes made ahead with the pristine checkout): seed time (the buggy checkout written into a
sandbox) p50 and p99, one `run_tests` of the whole visible suite, verification, and oracle
episodes per second (seed, apply the reverse patch, verify, close) at concurrency 1 and 2.
It reads the validated tasks from Rollgate's cache (building them first when absent: minutes).

    python -m benchmarks.bench_swe                        # every project, 4 tasks each
    python -m benchmarks.bench_swe --projects parse --tasks 8 --pool 0 4
    python -m benchmarks.bench_swe --provider docker      # the swe image (scripts/docker-swe-image.sh)

Prints a table and writes benchmarks/results/bench_swe.json.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks import cli
from benchmarks.common import percentile, print_table, write_results
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.families.swe.checkout import pristine
from rollgate.resources_servers.families.swe.env import SweEnv
from rollgate.resources_servers.families.swe.projects import PROJECTS
from rollgate.resources_servers.families.swe.sources import ensure_source
from rollgate.resources_servers.families.swe.tasks import task_row, validated


async def episode(rt: EnvRuntime, row: dict[str, Any], timings: dict[str, list[float]]) -> float:
    t0 = time.perf_counter()
    sid = (await rt.seed(row)).session_id
    t1 = time.perf_counter()
    call = row["gold"]["calls"][0]
    await rt.call_tool(sid, call["name"], call["arguments"])
    t2 = time.perf_counter()
    reward = (await rt.verify(sid, {"response": "done"})).reward
    t3 = time.perf_counter()
    await rt.close(sid)
    timings["seed"].append(t1 - t0)
    timings["verify"].append(t3 - t2)
    return reward


async def bench(name: str, n_tasks: int, rounds: int, pool: int, provider: str = "local") -> dict[str, Any]:
    home = Settings().home
    project = PROJECTS[name]
    files = pristine(ensure_source(project, home))
    rows = [
        task_row(f"swe/{name}", project, t, files, f"b{i}") for i, t in enumerate(validated(project, n_tasks, home))
    ]
    rt = EnvRuntime(SweEnv(name, home=home, sandbox=provider, warm_pool=pool), MemorySessionStore())
    timings: dict[str, list[float]] = {"seed": [], "verify": [], "run_tests": []}
    sid = (await rt.seed(rows[0])).session_id
    for _ in range(3):
        t0 = time.perf_counter()
        await rt.call_tool(sid, "run_tests", {"selector": ""})
        timings["run_tests"].append(time.perf_counter() - t0)
    await rt.close(sid)
    out: dict[str, Any] = {"project": name, "tasks": len(rows), "pool": pool}
    for concurrency in (1, 2):
        if rt.env.pool is not None:
            await rt.env.pool.wait_full(timeout_s=300)  # each round starts with a full pool
        gate = asyncio.Semaphore(concurrency)

        async def one(row: dict[str, Any], gate: asyncio.Semaphore = gate) -> float:
            async with gate:
                return await episode(rt, row, timings)

        t0 = time.perf_counter()
        rewards = await asyncio.gather(*(one(r) for _ in range(rounds) for r in rows))
        elapsed = time.perf_counter() - t0
        assert all(r == 1.0 for r in rewards), rewards
        out[f"episodes_per_s_c{concurrency}"] = len(rewards) / elapsed
    for key, values in timings.items():
        out[f"{key}_p50_s"] = percentile(values, 50)
        out[f"{key}_p99_s"] = percentile(values, 99)
    if rt.env.pool is not None:
        out["pool_hits"], out["pool_misses"] = rt.env.pool.hits, rt.env.pool.misses
    await rt.env.aclose()
    return out


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--projects", nargs="*", choices=sorted(PROJECTS), default=sorted(PROJECTS))
    parser.add_argument("--tasks", type=cli.COUNT, default=4)
    parser.add_argument("--rounds", type=cli.COUNT, default=1)
    parser.add_argument("--pool", type=cli.at_least(0), nargs="+", default=[0, 2], help="warm pool sizes (0: off)")
    parser.add_argument("--provider", choices=["local", "docker"], default="local", help="docker: the swe image")
    args = parser.parse_args()
    rows = [
        asyncio.run(bench(name, args.tasks, args.rounds, pool, args.provider))
        for name in args.projects
        for pool in args.pool
    ]
    columns = ["project", "tasks", "pool", "seed_p50_s", "seed_p99_s", "run_tests_p50_s", "verify_p50_s"]
    print_table(
        rows, [*columns, "episodes_per_s_c1", "episodes_per_s_c2"], f"swe oracle episodes ({args.provider} sandbox)"
    )
    print(write_results("bench_swe", {"results": rows}))


if __name__ == "__main__":
    main()
