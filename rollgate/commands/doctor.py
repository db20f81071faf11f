"""`rollgate doctor`: one line per configured part (OK / WARN / FAIL) and, for what is not OK, how
to fix it. Exit status 1 when anything FAILs, so scripts and CI can gate on it."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rollgate.core.doctor import CheckResult, Status, exit_code, run_checks
from rollgate.core.settings import Settings


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML settings file (also ROLLGATE_CONFIG)")
    p.add_argument("--gateway", metavar="URL", help="also check a running gateway (default: gateway_url setting)")
    p.add_argument("--redis-url", metavar="URL", help="check this Redis instead of the configured one")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="time limit of each check (default 5)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON array")


def format_result(r: CheckResult, width: int) -> str:
    line = f"{r.status.value:<5} {r.name:<{width}} {r.detail}"
    if r.fix and r.status is not Status.ok:
        line += f"\n{'':<5} {'':<{width}} fix: {r.fix}"
    return line


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.load(args.config, redis_url=args.redis_url)
    except Exception as exc:  # a broken config is the first thing doctor must explain, not a traceback
        print(
            f"FAIL  config  cannot load settings: {type(exc).__name__}: {exc}\n"
            "      fix: check the YAML file and the ROLLGATE_* variables",
            file=sys.stderr,
        )
        return 1
    results = asyncio.run(
        run_checks(settings, config_file=args.config, gateway_url=args.gateway, timeout_s=args.timeout)
    )
    if args.json:
        from rollgate.core import jsonutil

        print(jsonutil.dumps_str([r.model_dump(mode="json") for r in results]))
    else:
        width = max(len(r.name) for r in results)
        for r in results:
            print(format_result(r, width))
        failed = sum(r.status is Status.fail for r in results)
        warned = sum(r.status is Status.warn for r in results)
        print(f"\n{len(results)} checks: {failed} failed, {warned} warning(s)")
    return exit_code(results)
