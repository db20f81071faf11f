"""One progress bar for a command that learns its total only once the work is planned."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress(unit: str, *, disable: bool) -> Iterator[tuple[Callable[[int], None], Callable[[object], None]]]:
    """Yield (on_total, advance): the bar appears when on_total gives the count and is closed on
    leaving, before the caller prints any error (an error drawn between two bars is easy to miss)."""
    from tqdm import tqdm

    bars: list[tqdm] = []

    def on_total(n: int) -> None:
        if not bars:
            bars.append(tqdm(total=n, unit=unit, file=sys.stderr, disable=disable, dynamic_ncols=True))
        bars[0].reset(total=n)

    def advance(_item: object) -> None:
        if bars:
            bars[0].update(1)

    try:
        yield on_total, advance
    finally:
        for bar in bars:
            bar.close()
