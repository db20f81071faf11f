"""Long episodes: per-turn framework overhead over 20 tool turns with a growing context.

    python -m benchmarks.bench_long_episodes                 # embedded and distributed, 20 turns
    python -m benchmarks.bench_long_episodes --turns 40 --episodes 10

Each episode: the scripted policy calls the calculator on every turn, then answers. A turn is
the time from one model call's start to the next one's (model service + tool + the agent's own
bookkeeping), measured one episode at a time so it is the framework's cost, not queueing. The
request grows with every turn (the Responses API is stateless: the history is the request);
what must stay flat is everything else, so the table also shows the request size per turn.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from benchmarks import cli, common, stack
from benchmarks.bench_overhead import API_KEY, serve
from rollgate.agent_server.agent import Agent
from rollgate.core import jsonutil
from rollgate.core.rows import parse_row

REPORT_TURNS = (1, 5, 10, 20)


class TimedModel:
    """Wraps a model client: the start time and request size of every call of one episode."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.starts: list[float] = []
        self.sizes: list[int] = []
        self.measure_size = False

    async def create(self, request: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        self.starts.append(time.perf_counter())
        if self.measure_size:
            self.sizes.append(len(jsonutil.dumps(request)))
        return await self.inner.create(request, timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run_shape(shape: str, agent: Agent, turns: int, episodes: int) -> dict[str, Any]:
    timed = TimedModel(agent.model)
    agent.model = timed  # type: ignore[assignment]
    per_turn: list[list[float]] = [[] for _ in range(turns)]
    sizes: list[int] = []
    cpu0 = time.process_time()
    for e in range(episodes + 1):  # episode 0 warms up
        timed.starts, timed.sizes = [], []
        timed.measure_size = e == 1  # sizing costs time of its own: one episode only
        traj = await agent.run(parse_row(stack.task_row(e, tool_calls=turns), known_envs=agent.envs))
        if traj.outcome.value != "completed" or traj.reward != 1.0:
            raise RuntimeError(f"{shape}: episode failed: {traj.outcome.value} {traj.error}")
        if e == 0:
            cpu0 = time.process_time()
            continue
        if e == 1:
            sizes = timed.sizes
        for k in range(turns):
            per_turn[k].append(timed.starts[k + 1] - timed.starts[k])
    cpu = time.process_time() - cpu0
    med = [statistics.median(v) * 1000 for v in per_turn]
    row: dict[str, Any] = {
        "shape": shape,
        "turns": turns,
        "episodes": episodes,
        "agent_cpu_ms_per_turn": cpu / (episodes * turns) * 1000,
        "per_turn_ms": med,
        "request_bytes": sizes[:turns],
    }
    for t in REPORT_TURNS:
        if t <= turns:
            row[f"turn{t}_ms"] = med[t - 1]
            row[f"turn{t}_kb"] = sizes[t - 1] / 1024
    first, last = med[0], med[turns - 1]
    row["last_over_first"] = last / first
    return row


async def main_async(a: argparse.Namespace) -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="rollgate-bench-"))
    rows = []
    settings = stack.agent_settings(max_turns=a.turns + 2)
    if "embedded" in a.shapes:
        rows.append(await run_shape("embedded", stack.embedded_agent(settings=settings), a.turns, a.episodes))
    if "distributed" in a.shapes:
        model = serve("model", "model", log_dir).start()
        resources = serve("resources", "resources", log_dir, "--env", stack.ENV).start()
        try:
            agent = stack.http_agent(model.url, resources.url, api_key=API_KEY, settings=settings)
            rows.append(await run_shape("distributed", agent, a.turns, a.episodes))
            await stack.close_agent(agent)
        finally:
            model.stop()
            resources.stop()
    cols = [
        "shape",
        "turns",
        "episodes",
        *[c for t in REPORT_TURNS if t <= a.turns for c in (f"turn{t}_ms",)],
        "last_over_first",
        *[f"turn{t}_kb" for t in REPORT_TURNS if t <= a.turns],
        "agent_cpu_ms_per_turn",
    ]
    common.print_table(rows, cols, title=f"per-turn time (median of {a.episodes} episodes, one at a time)")
    path = common.write_results("bench_long_episodes", {"rows": rows, "load_avg_at_end": os.getloadavg()})
    print(f"\nwritten: {path}")
    return 0


def main() -> int:
    ap = cli.parser(__doc__)
    ap.add_argument("--shapes", default="embedded,distributed")
    ap.add_argument("--turns", type=cli.COUNT, default=20)
    ap.add_argument("--episodes", type=cli.COUNT, default=30)
    return uvloop.run(main_async(cli.parse_for_servers(ap)))


if __name__ == "__main__":
    sys.exit(main())
