"""`rollgate tasks ENV --n N --seed S --out FILE`: task rows for one environment, deterministic for
the seed. `--split train` (default) and `--split eval` never share a task: a task's split is a
hash of its content (rollgate/resources_servers/families/splits.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", metavar="ENV", help="environment name (see `rollgate envs`)")
    p.add_argument("--n", type=int, required=True, help="number of task rows")
    # Required, as `rollgate eval --n` requires it: a silent default makes two "different" task
    # files the same tasks.
    p.add_argument("--seed", type=int, required=True, help="generator seed (the same seed gives the same tasks)")
    p.add_argument("--out", required=True, metavar="FILE", help="JSONL file to write")
    p.add_argument("--config", metavar="JSON", help="generator config, e.g. '{\"min_terms\": 3}' (reasoning_gym)")
    p.add_argument("--split", choices=["train", "eval"], default="train", help="train (default) or held-out eval")


def run(args: argparse.Namespace) -> int:
    from rollgate.core.errors import RollgateError
    from rollgate.core.schemas import TaskRow
    from rollgate.resources_servers.registry import default_registry

    def fail(message: str) -> int:
        print(f"rollgate tasks: {message}", file=sys.stderr)
        return 2

    config = None
    if args.config:
        try:
            config = json.loads(args.config)
        except json.JSONDecodeError as exc:
            return fail(f"--config is not valid JSON: {exc}")
        if not isinstance(config, dict):
            return fail("--config must be a JSON object")
    try:
        spec = default_registry().get(args.env)
        if not spec.available:
            return fail(f"{args.env} is not available: {spec.reason}")
        if spec.tasks is None:
            return fail(f"{args.env} cannot generate tasks (its module has no task generator)")
        rows = spec.tasks(args.n, args.seed, config, args.split)
    except RollgateError as exc:
        where = f"--{exc.field}" if exc.field in ("n", "seed", "split") else (exc.field or "env")
        return fail(f"{where}: {exc.message}")
    for row in rows:
        TaskRow.model_validate(row)  # never write a row the servers would refuse
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows))
    tmp.replace(out)
    print(f"{len(rows)} {args.split} tasks for {args.env} (seed {args.seed}) -> {out}")
    return 0
