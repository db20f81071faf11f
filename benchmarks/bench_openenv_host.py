"""What hosting an OpenEnv environment through Rollgate's `openenv` kind adds per episode, compared
with driving the same environment directly (no model: seed/reset, K steps, verify, close).

    python -m benchmarks.bench_openenv_host --episodes 200 --steps 10

- in process: `env.reset()` + K `env.step()` on an instance, against Rollgate's EnvRuntime over
  OpenEnvEnvironment(OpenEnvClass) (seed, K tool calls, verify, close; memory session store).
- by URL: OpenEnv's own server (`create_app`, uvicorn in a subprocess), driven directly with raw
  WebSocket frames (the cheapest client there is), against the same EnvRuntime over
  OpenEnvServer. The difference is the adapter's cost per episode; the server's is in both.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks import cli
from benchmarks.common import free_port

ENV_SOURCE = '''
import random
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class AddAction(Action):
    """Add to the total."""
    amount: int


class TotalObservation(Observation):
    total: int = 0


class AddEnvironment(Environment[AddAction, TotalObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state, self.total = State(), 0

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state, self.total = State(episode_id=episode_id), random.Random(seed).randint(0, 9)
        return TotalObservation(total=self.total)

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        self.total += action.amount
        return TotalObservation(total=self.total, reward=0.1)

    @property
    def state(self):
        return self._state


app = create_app(AddEnvironment, AddAction, TotalObservation, env_name="add", max_concurrent_envs=4)
'''


async def direct_in_process(mod, episodes: int, steps: int) -> float:
    t, c = time.perf_counter(), time.process_time()
    for i in range(episodes):
        env = mod.AddEnvironment()
        env.reset(seed=i)
        for _ in range(steps):
            env.step(mod.AddAction(amount=1))
        env.close()
    return time.perf_counter() - t, time.process_time() - c


async def direct_ws(url: str, episodes: int, steps: int) -> float:
    from websockets.asyncio.client import connect

    t, c = time.perf_counter(), time.process_time()
    for i in range(episodes):
        async with connect(url.replace("http", "ws") + "/ws") as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": i}}))
            await ws.recv()
            for _ in range(steps):
                await ws.send(json.dumps({"type": "step", "data": {"amount": 1}}))
                await ws.recv()
            await ws.send(json.dumps({"type": "close"}))
    return time.perf_counter() - t, time.process_time() - c


async def through_rollgate(target, episodes: int, steps: int) -> float:
    from rollgate.core.session_store import MemorySessionStore
    from rollgate.resources_servers.base import EnvRuntime
    from rollgate.resources_servers.interop.openenv_env import OpenEnvEnvironment

    env = OpenEnvEnvironment(target)
    runtime = EnvRuntime(env, MemorySessionStore())
    t, c = time.perf_counter(), time.process_time()
    for i in range(episodes):
        seeded = await runtime.seed({"responses_create_params": {"input": "x"}, "seed": i})
        for _ in range(steps):
            out = await runtime.call_tool(seeded.session_id, "step", {"amount": 1})
            assert not out.is_error, out.output
        await runtime.verify(seeded.session_id, {"response": "x"})
        await runtime.close(seeded.session_id)
    took = time.perf_counter() - t, time.process_time() - c
    await env.aclose()
    return took


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    sys.path.insert(0, str(folder))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "addenv:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=folder,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(900):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the OpenEnv server did not start")


async def main() -> None:
    ap = cli.parser(__doc__)
    ap.add_argument("--episodes", type=cli.COUNT, default=200)
    ap.add_argument("--steps", type=cli.COUNT, default=10)
    ap.add_argument("--repeats", type=cli.COUNT, default=3)
    args = ap.parse_args()
    import importlib
    import tempfile

    from rollgate.resources_servers.interop.openenv_local import OpenEnvClass
    from rollgate.resources_servers.interop.openenv_targets import OpenEnvServer

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "addenv.py").write_text(ENV_SOURCE)
        proc, url = start_server(folder)
        try:
            mod = importlib.import_module("addenv")
            runs = {
                "in process, direct": lambda: direct_in_process(mod, args.episodes, args.steps),
                "in process, Rollgate": lambda: through_rollgate(
                    OpenEnvClass.load("addenv:AddEnvironment"), args.episodes, args.steps
                ),
                "by URL, direct frames": lambda: direct_ws(url, args.episodes, args.steps),
                "by URL, Rollgate": lambda: through_rollgate(OpenEnvServer(url), args.episodes, args.steps),
            }
            best: dict[str, tuple[float, float]] = {}
            for name, run in runs.items():
                await run()  # warm-up
                results = [await run() for _ in range(args.repeats)]
                best[name] = (min(r[0] for r in results) / args.episodes, min(r[1] for r in results) / args.episodes)
        finally:
            proc.kill()
            proc.wait()
    print(f"{args.episodes} episodes x {args.steps} steps, best of {args.repeats}, per episode (client process):")
    print(f"  {'':24s} {'wall ms':>9s} {'CPU ms':>9s}")
    for name, (wall, cpu) in best.items():
        print(f"  {name:24s} {wall * 1000:9.2f} {cpu * 1000:9.2f}")
    for where, direct in (("in process", "in process, direct"), ("by URL", "by URL, direct frames")):
        wall = best[f"{where}, Rollgate"][0] - best[direct][0]
        cpu = best[f"{where}, Rollgate"][1] - best[direct][1]
        print(f"  added by the adapter, {where}: {wall * 1000:.2f} ms wall, {cpu * 1000:.2f} ms CPU per episode")


if __name__ == "__main__":
    asyncio.run(main())
