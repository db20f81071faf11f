"""The gateway's proxy: what relaying costs the gateway, for a small JSON answer (an environment's
`GET /envs/math/tools`) and an SSE stream (`POST /v1/responses` with `stream: true`, relayed chunk
by chunk), through `rollgate serve --role gateway` to its upstreams on loopback.

    python -m benchmarks.bench_proxy                          # 5 s per call kind, concurrency 16
    python -m benchmarks.bench_proxy --seconds 10 --concurrency 64 --repeats 3

The processes are rollgate.core.topology's loopback shape without agent workers: a model server
(scripted backend), the math resources server and the gateway, with the real Redis (the gateway's
job queue; unused here). This process drives the calls with aiohttp, `--concurrency` at a time.
The gateway's CPU per call is the figure that a change to the proxy moves; calls/s also depends on
the upstreams and on this driver, which share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import cli, common
from benchmarks.common import Proc, free_port, percentile, rollgate_cmd
from rollgate.core.topology import loopback_topology

log = logging.getLogger("rollgate.bench")
API_KEY = "bench-" + os.urandom(8).hex()
STREAM = {"model": "scripted", "input": "What is 6*7? Use the calculator.", "stream": True}
COLUMNS = ["call", "concurrency", "calls", "errors", "calls_per_s", "gateway_cpu_ms_per_call", "p50_ms", "p99_ms"]


def start(redis_url: str, log_dir: Path) -> list[Proc]:
    ports: dict[tuple[str, int], int] = {}
    specs = loopback_topology(
        ["math"],
        redis_url=redis_url,
        api_key=API_KEY,
        model_backend="scripted",
        port_of=lambda name, i: ports.setdefault((name, i), free_port()),
    )
    extra = {
        "ROLLGATE_LOG_LEVEL": "WARNING",
        "ROLLGATE_GATEWAY__QUEUE_PREFIX": f"rgbench:{uuid.uuid4().hex[:12]}:q",
        "ROLLGATE_GATEWAY__UI": "false",
        "ROLLGATE_MODEL__MODEL_PATH": "",
        "ROLLGATE_MODEL__SERVED_NAME": "scripted",
    }
    procs = [
        Proc(s.name, rollgate_cmd(*s.command(0)), s.replica_ports[0], env={**s.env, **extra}, log_dir=log_dir)
        for s in specs
        if s.name != "agent"
    ]
    try:
        with ThreadPoolExecutor(max_workers=len(procs)) as pool:
            for fut in [pool.submit(p.start, 120) for p in procs]:
                fut.result()
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


async def call_tools(http: aiohttp.ClientSession, gateway: str) -> None:
    async with http.get(f"{gateway}/envs/math/tools") as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET /envs/math/tools: {resp.status}")


async def call_stream(http: aiohttp.ClientSession, gateway: str) -> None:
    async with http.post(f"{gateway}/v1/responses", json=STREAM) as resp:
        if resp.status != 200 or not resp.headers.get("content-type", "").startswith("text/event-stream"):
            raise RuntimeError(f"POST /v1/responses (stream): {resp.status}")
        async for _ in resp.content.iter_any():
            pass


async def drive(kind: str, gateway: str, gateway_pid: int, concurrency: int, seconds: float) -> dict[str, Any]:
    call = {"tools (JSON)": call_tools, "responses (SSE)": call_stream}[kind]
    headers = {"authorization": f"Bearer {API_KEY}"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
        for _ in range(concurrency):  # warm: connections open, first-call paths taken
            await call(http, gateway)
        latencies: list[float] = []
        errors = 0
        deadline = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal errors
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                try:
                    await call(http, gateway)
                except (RuntimeError, aiohttp.ClientError):
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - t0)

        cpu0, t0 = common.cpu_seconds(gateway_pid), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, common.cpu_seconds(gateway_pid) - cpu0
    n = len(latencies)
    return {
        "call": kind,
        "concurrency": concurrency,
        "calls": n,
        "errors": errors,
        "calls_per_s": n / wall,
        "gateway_cpu_ms_per_call": cpu / max(1, n) * 1000,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


async def main_async(a: argparse.Namespace) -> int:
    common.raise_fd_limit()
    log_dir = Path(tempfile.mkdtemp(prefix="rollgate-bench-proxy-"))
    procs = start(a.redis_url, log_dir)
    try:
        gateway = next(p for p in procs if p.name == "gateway")
        runs = []
        for rep in range(a.repeats):
            for kind in ("tools (JSON)", "responses (SSE)"):
                row = {
                    **await drive(kind, gateway.url, gateway.pid, a.concurrency, a.seconds),
                    "load_avg": os.getloadavg()[0],
                }
                runs.append(row)
                common.print_table(
                    [row], COLUMNS, title=f"{kind}, run {rep + 1}/{a.repeats} (load avg {row['load_avg']:.2f})"
                )
    finally:
        for p in procs:
            p.stop()
    table = []
    for kind in dict.fromkeys(r["call"] for r in runs):
        mine = [r for r in runs if r["call"] == kind]
        median = {
            k: common.spread([r[k] for r in mine])["median"]
            for k in ("calls_per_s", "gateway_cpu_ms_per_call", "p50_ms", "p99_ms")
        }
        table.append(
            {**mine[0], **median, "calls": sum(r["calls"] for r in mine), "errors": sum(r["errors"] for r in mine)}
        )
    common.print_table(table, COLUMNS, title=f"median of {a.repeats} runs of {a.seconds:g} s")
    path = common.write_results(
        "bench_proxy",
        {"concurrency": a.concurrency, "seconds": a.seconds, "repeats": a.repeats, "median": table, "runs": runs},
    )
    print(f"\nwritten: {path} (server logs: {log_dir})")
    return 0


def main() -> int:
    ap = cli.parser(__doc__)
    ap.add_argument("--concurrency", type=cli.COUNT, default=16, help="calls in flight")
    ap.add_argument("--seconds", type=cli.positive(), default=5.0, help="measured time per call kind and run")
    ap.add_argument("--repeats", type=cli.COUNT, default=1)
    cli.add_redis_url(ap, "Redis (the gateway role needs its job queue)")
    return asyncio.run(main_async(cli.parse_for_servers(ap)))


if __name__ == "__main__":
    sys.exit(main())
