"""Write examples/<env>.jsonl for every registered environment whose module has `example_tasks`.

    python scripts/gen_examples.py [--env NAME ...] [--n 24] [--seed 0] [--out examples]

Output is byte-identical on re-run (deterministic generators, fixed key order, one row a line),
so the files can be kept in git and regenerated to check them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path

from rollgate.core.schemas import TaskRow
from rollgate.resources_servers.registry import default_registry

log = logging.getLogger("gen_examples")
ROOT = Path(__file__).resolve().parent.parent
# single environments (families generate their rows on demand: `rollgate tasks`)
SHIPPED = sorted(n for n, s in default_registry().specs().items() if s.family is None)


def generator_for(env: str):
    """The env module's `example_tasks`, or None when the module lacks one (or is not built yet)."""
    module_name = default_registry().get(env).env_class.__module__
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            log.warning("skipping %s: module %s does not exist", env, module_name)
            return None
        raise
    return getattr(module, "example_tasks", None)


def write_examples(env: str, n: int, seed: int, out_dir: Path) -> Path | None:
    gen = generator_for(env)
    if gen is None:
        return None
    rows = gen(n, seed)
    if len(rows) != n:
        raise SystemExit(f"{env}: example_tasks({n}, {seed}) returned {len(rows)} rows")
    lines = []
    for row in rows:
        TaskRow.model_validate(row)  # never write a row the servers would reject
        if row.get("env") != env:
            raise SystemExit(f"{env}: row {row.get('task_id')} has env {row.get('env')!r}")
        lines.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    path = out_dir / f"{env}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--env",
        action="append",
        choices=SHIPPED,
        help="environment to generate (repeatable; default: all that have example_tasks)",
    )
    p.add_argument("--n", type=int, default=24, help="tasks per environment (default 24)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--out", type=Path, default=ROOT / "examples", help="output folder (default examples/)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.n < 1:
        p.error("--n must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    for env in args.env or SHIPPED:
        path = write_examples(env, args.n, args.seed, args.out)
        if path is not None:
            print(f"{env}: {args.n} tasks -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
