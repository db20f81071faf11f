"""The measurement loops the model benchmarks share: a closed loop of calls at a fixed
concurrency, rounds that alternate the sides under comparison, and medians over repeated runs.

A side measured always first (or always last) would take the machine's drift alone: on a shared
machine the load moves between runs, so sides alternate round by round and medians are reported."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

K = TypeVar("K")
T = TypeVar("T")


async def closed_loop(
    call: Callable[[int], Awaitable[T]], *, concurrency: int, requests: int, offset: int = 0
) -> tuple[list[T], float]:
    """`call(offset + i)` for i in range(requests), at most `concurrency` in flight: a closed loop
    (a slot frees, the next call starts). Returns the results in order and the wall seconds."""
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> T:
        async with slots:
            return await call(i)

    started = time.perf_counter()
    results = await asyncio.gather(*(one(offset + i) for i in range(requests)))
    return list(results), time.perf_counter() - started


def alternating(sides: Iterable[K], rnd: int) -> list[K]:
    """The order of the sides in round `rnd`: as given in even rounds, reversed in odd ones."""
    order = list(sides)
    return order if rnd % 2 == 0 else order[::-1]


def counters_since(before: Mapping[str, float], after: Mapping[str, float], keys: Iterable[str]) -> dict[str, float]:
    """What an engine's cumulative counters (`engine.stats`) grew by over a run."""
    return {k: after[k] - before[k] for k in keys}


def median_of(runs: Sequence[Mapping[str, Any]], key: str, digits: int | None = None) -> float:
    """The median of `key` over repeated runs, rounded to `digits` when given."""
    value = statistics.median(r[key] for r in runs)
    return value if digits is None else round(value, digits)
