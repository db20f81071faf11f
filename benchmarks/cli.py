"""The command-line flags the benchmarks share, declared once: the parser, counts checked where
they are parsed (`--repeats 0` is refused naming the flag and why), the Redis URL of the cluster
benchmarks, and the model flags of the model-server benchmarks (`--model`, `--device`,
`--threads`) with the tiny model as the default."""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import exit_on_sigterm

REDIS_URL_ENV = "ROLLGATE_BENCH_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def parser(doc: str | None, *, whole_doc: bool = False) -> argparse.ArgumentParser:
    """A benchmark's parser: its module docstring's first paragraph as the description, or the
    whole docstring, laid out as written, where it documents the results (`whole_doc`)."""
    text = doc or ""
    if whole_doc:
        return argparse.ArgumentParser(description=text, formatter_class=argparse.RawDescriptionHelpFormatter)
    return argparse.ArgumentParser(description=text.split("\n\n")[0])


def at_least(low: float, kind: Callable[[str], float] = int) -> Callable[[str], float]:
    """An argparse type: a number of `kind` that is at least `low`. argparse names the flag in
    the error ("argument --repeats: must be >= 1, got 0") and exits 2."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low:g}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse's own messages name the type
    return parse


def positive(kind: Callable[[str], float] = float) -> Callable[[str], float]:
    """An argparse type: a number of `kind` above 0 (durations, delays)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


COUNT = at_least(1)  # repeats, rounds, tasks, workers: one at least


def int_list(text: str) -> list[int]:
    """A comma-separated list of counts (`--concurrency 1,64,256`), each at least 1."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def add_redis_url(p: argparse.ArgumentParser, help_text: str, *, default: str | None = None) -> None:
    """`--redis-url`, by default $ROLLGATE_BENCH_REDIS_URL or the local server's database 0."""
    p.add_argument(
        "--redis-url",
        default=os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL) if default is None else default,
        help=help_text,
    )


def add_model_flags(p: argparse.ArgumentParser, *, device: str = "auto", threads: int = 1) -> None:
    """`--model` (a model directory; default: the tiny model, built once in the temp directory),
    `--device` and `--threads` of the local backend."""
    p.add_argument("--model", help="model directory (default: build the tiny model in a temp dir)")
    p.add_argument("--device", default=device)
    # A tiny model's ops are too small to split over threads; on a busy shared machine the
    # intra-op thread barriers stall whenever a core is taken, so one thread is the steady default.
    p.add_argument("--threads", type=COUNT, default=threads, help="torch intra-op threads (CPU)")


def model_dir(model: str | None) -> str:
    """The `--model` directory, or the tiny model's (built on first use, then reused)."""
    if model:
        return model
    from rollgate.model_server.tiny import ensure_tiny_model

    return str(ensure_tiny_model(Path(tempfile.gettempdir()) / "rollgate-bench" / "tiny-model"))


def parse_for_servers(p: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the flags of a benchmark that starts server processes: warnings only in its log, and
    SIGTERM (e.g. from `timeout`) unwinding like Ctrl-C so that `finally` blocks stop the servers."""
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    exit_on_sigterm()
    return args
