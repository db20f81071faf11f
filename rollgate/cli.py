"""The `rollgate` command: a thin dispatcher. Each subcommand lives in rollgate/commands/<name>.py
and exposes `add_parser(parser)` and `run(args) -> int`; only the chosen one is imported, so
`--help` and light commands start fast."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("rollgate.commands.serve", "run Rollgate: everything in one process, or one role"),
    "collect": ("rollgate.commands.collect", "collect rollouts for a task file into a JSONL file"),
    "demo": ("rollgate.commands.demo", "the first-run demo: build the tiny model, collect, summarise"),
    "model": ("rollgate.commands.model", "model utilities (build the offline tiny model)"),
    "export": ("rollgate.commands.export", "export trajectories for trainers (jsonl, parquet, sft)"),
    "doctor": ("rollgate.commands.doctor", "check every configured part and say how to fix what fails"),
    "eval": ("rollgate.commands.eval", "evaluate on environments: pass@k with intervals, compare, reverify"),
    "audit": ("rollgate.commands.audit", "probe environments for reward hacks with scripted policies"),
    "envs": ("rollgate.commands.envs", "list every environment: family, tools, available or why not"),
    "tasks": ("rollgate.commands.tasks", "write N task rows for an environment (train or eval split)"),
    "train": ("rollgate.commands.train", "run a learning recipe: SFT on gold demos, then GRPO, held-out curve"),
}


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollgate",
        description="Rollgate: collect RL rollouts for LLM agents.",
        epilog="Settings also come from ROLLGATE_* environment variables and a YAML file (--config).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = importlib.import_module(module)
            mod.add_parser(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(chosen)
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 0 if not argv else 2
    return int(run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
