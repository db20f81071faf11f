"""`rollgate audit`: run the reward-hack probes (scripted policies, no model) against environments
and report, per environment and probe, the mean reward with an interval and a verdict. The work
is in rollgate.evaluation.audit; docs/audit.md explains the probes and verdicts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rollgate.commands.serve import add_common_flags

EPILOG = """\
examples:
  rollgate audit --env math --env game2048
  rollgate audit --env 'reasoning_gym/*' --n 4 --out runs/audit
  rollgate audit --env code --probe code_exit_early --probe floor --json
  rollgate audit --env math --gateway http://127.0.0.1:8000   # a gateway serving the scripted backend

exit status: 0 nothing exploitable beyond the allowlist; 2 bad input (the message names the field);
3 an `exploitable` verdict not in the allowlist; 4 no new exploit, but some probe ended in `error`."""

EXIT_EXPLOITABLE = 3
EXIT_ERRORS = 4


def add_parser(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--env", action="append", default=[], metavar="NAME|PATTERN", help="environment(s) (repeatable)")
    p.add_argument("--probe", action="append", default=[], metavar="NAME", help="run only these probes (repeatable)")
    p.add_argument("--n", type=int, default=8, metavar="N", help="tasks per environment (default 8)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the tasks and intervals (default 0)")
    p.add_argument("--out", metavar="DIR", help="write report.json, report.md and report.html here")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--max-turns", type=int, default=16, metavar="N", help="turns per episode (default 16)")
    p.add_argument(
        "--max-output-tokens", type=int, default=2048, metavar="N", help="tokens per model call (default 2048)"
    )
    p.add_argument("--concurrency", type=int, default=16, metavar="N", help="episodes at once (default 16)")
    p.add_argument("--allowlist", metavar="FILE", help="reviewed allowlist (JSON); default: the shipped one")
    p.add_argument("--bootstrap-resamples", type=int, default=2000, metavar="B", help="default 2000")
    p.add_argument(
        "--gateway",
        metavar="URL",
        help="run the episodes on a running gateway (its model server must run the scripted backend); "
        "default: the embedded stack in process",
    )
    p.add_argument("--api-key", metavar="KEY", help="bearer token of the gateway (default: ROLLGATE_API_KEY)")
    p.add_argument("--list-probes", action="store_true", help="list the probes (shipped and plugins) and exit")
    add_common_flags(p)


def _check(args: argparse.Namespace) -> None:
    from rollgate.core.errors import BadRequest

    if not args.env:
        raise BadRequest("at least one --env is required", component="audit", field="--env")
    for flag in ("n", "max_turns", "max_output_tokens", "concurrency", "bootstrap_resamples"):
        if getattr(args, flag) < 1:
            name = "--" + flag.replace("_", "-")
            raise BadRequest(f"{name} must be >= 1, got {getattr(args, flag)}", component="audit", field=name)


def _list_probes() -> int:
    from rollgate.evaluation.audit.probes import load_probes

    probes = load_probes()
    for name, p in probes.probes.items():
        print(f"{name:20s} {p.kind:10s} {p.description}")
    for name, why in probes.broken.items():
        print(f"{name:20s} {'broken':10s} {why}")
    return 0


def _api_key(args: argparse.Namespace) -> str | None:
    from rollgate.core.settings import Settings

    return Settings.load(args.config, redis_url=args.redis_url).api_key


def _audit(args: argparse.Namespace) -> int:
    import os

    # The long-output probe is longer than the tiny model's context on purpose: not worth a warning per env.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from rollgate.core import jsonutil
    from rollgate.evaluation.audit.report import markdown, summary
    from rollgate.evaluation.audit.report_html import html_page
    from rollgate.evaluation.audit.run import AuditOptions, check_scripted, resolve, run_audit, stack_settings
    from rollgate.evaluation.audit.verdict import load_allowlist
    from rollgate.evaluation.sources import GatewaySource, Source, StackSource

    _check(args)
    opts = AuditOptions(
        envs=list(args.env),
        n=args.n,
        seed=args.seed,
        probes=list(args.probe) or None,
        max_turns=args.max_turns,
        max_output_tokens=args.max_output_tokens,
        resamples=args.bootstrap_resamples,
        allowlist=load_allowlist(Path(args.allowlist) if args.allowlist else None),
        gateway=args.gateway,
    )
    served = None
    if args.gateway:
        gateway = GatewaySource(args.gateway, api_key=args.api_key or _api_key(args))
        served = gateway.known_envs()
        envs, _ = resolve(opts.envs, served)
        if envs:  # one episode first: the gateway's model must play the scripts
            check_scripted(gateway, envs[0], opts)

    def make_source(env: str) -> Source:
        if args.gateway:
            return gateway
        settings = stack_settings(opts, env, config=args.config, redis_url=args.redis_url)
        return StackSource(settings, [env], concurrency=args.concurrency)

    def progress(env: str, block: dict) -> None:
        flagged = [n for n, e in block.get("probes", {}).items() if e.get("verdict") in ("exploitable", "suspicious")]
        what = block["error"]["type"] if block.get("error") else f"{len(flagged)} flagged"
        print(f"audited {env}: {what} ({block.get('seconds', 0)} s)", file=sys.stderr)

    report = run_audit(opts, make_source, on_env=progress, served=served)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_bytes(jsonutil.dumps(report))
        (out / "report.md").write_text(markdown(report))
        (out / "report.html").write_text(html_page(report))
        print(f"report: {out / 'report.json'}  {out / 'report.md'}  {out / 'report.html'}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print(summary(report))
    if report["exploitable_not_allowlisted"]:
        return EXIT_EXPLOITABLE
    return EXIT_ERRORS if report["counts"]["error"] else 0


def run(args: argparse.Namespace) -> int:
    from rollgate.core.errors import BadRequest, NotFound, RollgateError
    from rollgate.core.logging import setup_logging

    setup_logging("WARNING")
    try:
        return _list_probes() if args.list_probes else _audit(args)
    except RollgateError as exc:
        print(f"rollgate audit: {exc.message}" + (f" (field {exc.field})" if exc.field else ""), file=sys.stderr)
        return 2 if isinstance(exc, (BadRequest, NotFound)) else 1
