"""Local sandbox latency and throughput: create + exec(`print(1)` in Python) + destroy, the pattern
of every `code` tool call and verify, at concurrency 1 and 8; plus exec alone in a live sandbox
and, for scale, a bare `python3 -c 'print(1)'` subprocess without any isolation. With `--remote`,
the same two through the sandbox service (`rollgate serve --role sandbox`, a process on loopback)
and the remote provider, which the code environment uses where it cannot isolate code itself.

    python -m benchmarks.bench_sandbox                      # 5 s per configuration
    python -m benchmarks.bench_sandbox --seconds 10 --concurrency 1 8 16
    python -m benchmarks.bench_sandbox --remote --concurrency 8

Prints a table and writes benchmarks/results/sandbox.json.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks import cli
from benchmarks.common import Proc, free_port, percentile, print_table, rollgate_cmd, write_results
from rollgate.sandbox.base import SandboxProvider
from rollgate.sandbox.local import LocalProvider
from rollgate.sandbox.remote import RemoteProvider

log = logging.getLogger("bench_sandbox")


async def _drive(op: Callable[[], Awaitable[None]], concurrency: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            await op()
            latencies.append(time.perf_counter() - t0)

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - t0
    return {
        "ops": len(latencies),
        "ops_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


async def _sandbox_rows(provider: SandboxProvider, seconds: float, concurrencies: list[int], where: str) -> list:
    async def full() -> None:
        sb = await provider.create()
        try:
            r = await sb.exec(code="print(1)")
            assert r.stdout == "1\n", r
        finally:
            await sb.destroy()

    rows = []
    await full()  # warm the page cache
    for c in concurrencies:
        rows.append({"operation": f"create+exec+destroy{where}", "concurrency": c, **await _drive(full, c, seconds)})
    live = await provider.create()
    try:

        async def exec_only() -> None:
            assert (await live.exec(code="print(1)")).stdout == "1\n"

        rows.append(
            {"operation": f"exec (live sandbox){where}", "concurrency": 1, **await _drive(exec_only, 1, seconds)}
        )
    finally:
        await live.destroy()
    return rows


async def _remote_rows(seconds: float, concurrencies: list[int]) -> list:
    token, port = os.urandom(8).hex(), free_port()
    env = {"ROLLGATE_SANDBOX__TOKEN": token, "ROLLGATE_LOG_LEVEL": "WARNING"}
    service = Proc("sandbox", rollgate_cmd("serve", "--role", "sandbox", "--port", str(port)), port, env=env)
    service.start(120)
    provider = RemoteProvider(service.url, token)
    try:
        return await _sandbox_rows(provider, seconds, concurrencies, ", remote")
    finally:
        await provider.close()
        service.stop()


async def run(seconds: float, concurrencies: list[int], remote: bool = False) -> dict[str, Any]:
    provider = LocalProvider()

    async def bare() -> None:
        proc = await asyncio.create_subprocess_exec(provider.python, "-c", "print(1)", stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        assert out == b"1\n"

    rows = await _sandbox_rows(provider, seconds, concurrencies, "")
    if remote:
        rows += await _remote_rows(seconds, concurrencies)
    for c in concurrencies:
        rows.append({"operation": "bare python, no sandbox", "concurrency": c, **await _drive(bare, c, seconds)})
    return {"isolation": provider.capabilities(), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = cli.parser(__doc__)
    p.add_argument("--seconds", type=cli.positive(), default=5.0, help="duration of each configuration (default 5)")
    p.add_argument("--concurrency", type=cli.COUNT, nargs="+", default=[1, 8], help="concurrent runs (default 1 8)")
    p.add_argument("--remote", action="store_true", help="also through the sandbox service and the remote provider")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = asyncio.run(run(args.seconds, args.concurrency, args.remote))
    print_table(
        result["rows"],
        ["operation", "concurrency", "ops", "ops_per_s", "p50_ms", "p99_ms"],
        title=f"local sandbox (isolation: {result['isolation']['mode']})",
    )
    shown = sys.argv[1:] if argv is None else argv
    path = write_results(
        "sandbox", {"command": " ".join(["python -m benchmarks.bench_sandbox", *shown]).strip(), **result}
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
