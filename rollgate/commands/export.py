"""`rollgate export`: trajectories (the JSONL that `rollgate collect` writes) for trainers."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--in", dest="src", required=True, metavar="FILE", help="trajectory JSONL to read")
    p.add_argument(
        "--out",
        dest="dst",
        required=True,
        metavar="FILE",
        help="file to write (replaced only when the whole input is valid)",
    )
    p.add_argument(
        "--format",
        dest="fmt",
        choices=["jsonl", "parquet", "sft"],
        default="jsonl",
        help="jsonl: validated trajectories; parquet: flat columns + nested token data; "
        "sft: chat transcripts of successful (completed, reward > 0) episodes",
    )
    p.add_argument(
        "--min-reward",
        type=float,
        default=None,
        metavar="R",
        help="keep only trajectories with reward >= R (failed episodes have no reward)",
    )
    p.add_argument(
        "--role",
        dest="roles",
        action="append",
        default=None,
        metavar="ROLE",
        help="multi-role trajectories (collect --roles): keep only this role's (repeat for several); "
        "default: every role's trajectory, each a sample with its role recorded (shared weights)",
    )


def run(args: argparse.Namespace) -> int:
    from rollgate.core.errors import RollgateError
    from rollgate.trainer_adapters.exports import export

    if args.min_reward is not None and not math.isfinite(args.min_reward):
        print("rollgate export: --min-reward must be a finite number", file=sys.stderr)
        return 2
    try:
        stats = export(Path(args.src), Path(args.dst), args.fmt, min_reward=args.min_reward, roles=args.roles)
    except RollgateError as exc:
        print(f"rollgate export: {args.src}: {exc.message}", file=sys.stderr)
        return 2
    print(
        f"wrote {stats.written} of {stats.read} trajectories to {args.dst} ({args.fmt}); "
        f"{stats.filtered} filtered out, "
        + (f"{stats.other_roles} of other roles left out, " if args.roles else "")
        + f"{stats.skipped_failures} failure records skipped"
    )
    return 0
