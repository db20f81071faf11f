"""`rollgate model`: model utilities. `rollgate model tiny --out DIR [--seed N]` builds the
offline tiny model (tokenizer + small Qwen2-style LM, warmed up on synthetic agent transcripts)."""

from __future__ import annotations

import argparse


def add_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    tiny = sub.add_parser(
        "tiny",
        help="build the offline tiny model (seconds, no network)",
        description="Build the offline tiny model into DIR (deterministic for a seed).",
    )
    tiny.add_argument("--out", required=True, metavar="DIR", help="directory to write the model to")
    tiny.add_argument("--seed", type=int, default=0, help="seed (the same seed gives identical files)")
    tiny.add_argument(
        "--warmup-steps",
        type=int,
        default=None,
        help="warm-up training steps (default: the built-in number; 0 = random weights)",
    )


def run(args: argparse.Namespace) -> int:
    import time

    from rollgate.core.logging import setup_logging
    from rollgate.model_server.tiny import WARMUP_STEPS, build_tiny_model

    setup_logging("WARNING")
    started = time.perf_counter()
    steps = WARMUP_STEPS if args.warmup_steps is None else args.warmup_steps
    out = build_tiny_model(args.out, args.seed, warmup_steps=steps)
    print(f"tiny model written to {out} in {time.perf_counter() - started:.1f}s")
    return 0
