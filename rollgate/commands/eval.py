"""`rollgate eval`: evaluate a model on environments (pass@k, majority@k, intervals), compare two
evaluations (`rollgate eval compare A B`) and re-score stored trajectories with today's
verifiers (`rollgate eval reverify SRC`). The work is in rollgate.evaluation; see
docs/evaluation.md for the estimators."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rollgate.commands import eval_games
from rollgate.commands.progress import progress
from rollgate.commands.serve import add_common_flags, add_model_flag, apply_model_flag

EPILOG = """\
examples:
  rollgate eval --env math --tasks examples/math.jsonl --k 8 --out runs/eval-a
  rollgate eval --env math --env wordle --n 50 --seed 1 --k 4 --out runs/eval-b --gateway http://127.0.0.1:8000
  rollgate eval compare runs/eval-a runs/eval-b
  rollgate eval compare ckpt-200 ckpt-100 --env textarena/TicTacToe --n 50 --seed 1 --games 2
  rollgate eval reverify runs/eval-a --out runs/eval-a-reverified

exit status: 0 done; 2 bad input (the message names the field); 3 the report was written but more
samples failed (env_error, model_error, timeout) than --max-failure-fraction allows; 130 interrupted
(re-run with --resume to go on)."""


def add_parser(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--env", action="append", default=[], metavar="ENV", help="environment to evaluate (repeatable)")
    src = p.add_argument_group("tasks (one of)")
    src.add_argument("--tasks", metavar="FILE", help="task rows (JSONL); rows of other environments are skipped")
    src.add_argument("--n", type=int, metavar="N", help="generate N tasks per environment (needs --seed)")
    src.add_argument("--seed", type=int, metavar="S", help="seed of the generated tasks")
    src.add_argument("--split", choices=["train", "eval"], help="named split of the generated tasks")
    p.add_argument("--k", type=int, metavar="K", help="samples per task (required)")
    p.add_argument("--pass-k", metavar="LIST", help="k values of pass@k and majority@k, e.g. 1,4,8 (default 1,2,4..K)")
    p.add_argument("--out", metavar="DIR", help="report directory (required): report.json, report.html, samples.jsonl")
    p.add_argument("--threshold", type=float, default=1.0, help="a sample is correct when reward >= this (default 1)")
    p.add_argument(
        "--max-failure-fraction",
        type=float,
        default=0.1,
        metavar="F",
        help="exit 3 when more than this fraction of samples failed (default 0.1)",
    )
    p.add_argument("--resume", action="store_true", help="continue the run in --out: keep its valid samples")
    p.add_argument("--train-tasks", metavar="FILE", help="warn about eval tasks whose content is in this training file")
    p.add_argument("--strict", action="store_true", help="with --train-tasks: refuse instead of warning")
    p.add_argument("--bootstrap-resamples", type=int, default=2000, metavar="B", help="default 2000")
    p.add_argument("--bootstrap-seed", type=int, default=0, metavar="S", help="default 0")
    model = p.add_argument_group("model and rollouts")
    model.add_argument("--gateway", metavar="URL", help="a running gateway; default: the embedded stack in process")
    model.add_argument("--api-key", metavar="KEY", help="bearer token of the gateway (default: ROLLGATE_API_KEY)")
    model.add_argument("--backend", choices=["local", "vllm", "openai", "scripted"], help="model backend (embedded)")
    model.add_argument("--model-path", metavar="DIR", help="model directory of the local backend (embedded)")
    add_model_flag(model)
    model.add_argument("--policy-version", metavar="V", help="recorded on every trajectory and in the report")
    model.add_argument("--temperature", type=float, help="sampling temperature")
    model.add_argument("--top-p", type=float, help="nucleus sampling")
    model.add_argument("--max-output-tokens", type=int, metavar="N", help="per model call")
    model.add_argument("--max-turns", type=int, metavar="N", help="turns per episode (embedded)")
    model.add_argument("--concurrency", type=int, metavar="N", help="episodes at once (embedded)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_common_flags(p)

    sub = p.add_subparsers(dest="eval_action", metavar="{compare,reverify,play}")
    c = sub.add_parser(
        "compare",
        help="paired comparison of two evaluation directories (B against A); with --env GAME, two policies "
        "play each other head to head (A's win rate)",
    )
    c.add_argument("a", metavar="A", help="evaluation directory of the baseline; with --env: the first policy")
    c.add_argument("b", metavar="B", help="evaluation directory of the candidate; with --env: the second policy")
    c.add_argument("--threshold", dest="cmp_threshold", type=float, help="override both reports' threshold")
    c.add_argument("--out", dest="cmp_out", metavar="FILE", help="also write the comparison as JSON here")
    c.add_argument("--bootstrap-resamples", dest="cmp_resamples", type=int, default=2000, metavar="B")
    c.add_argument("--bootstrap-seed", dest="cmp_seed", type=int, default=0, metavar="S")
    eval_games.add_flags(c)
    r = sub.add_parser("reverify", help="re-score stored trajectories with today's verifiers (no model calls)")
    r.add_argument("src", metavar="SRC", help="an evaluation directory or a trajectory file (JSONL)")
    r.add_argument("--out", dest="rv_out", required=True, metavar="DIR", help="directory of the new report")
    r.add_argument("--threshold", dest="rv_threshold", type=float, help="default: the source report's")
    r.add_argument("--config", dest="rv_config", metavar="FILE", help="YAML settings (e.g. the code sandbox)")
    g = sub.add_parser("play", help="win / draw / loss rates of multi-role episodes, per role and head to head")
    g.add_argument("src", metavar="FILE", help="per-role trajectories (JSONL) of `rollgate collect --roles`")
    g.add_argument("--out", dest="play_out", metavar="FILE", help="also write the report as JSON here")
    g.add_argument("--bootstrap-resamples", dest="play_resamples", type=int, default=2000, metavar="B")
    g.add_argument("--bootstrap-seed", dest="play_seed", type=int, default=0, metavar="S")


def _pass_k(text: str | None, k: int) -> tuple[int, ...]:
    from rollgate.core.errors import BadRequest
    from rollgate.core.eval_metrics import default_pass_k

    if not text:
        return default_pass_k(k)
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise BadRequest(
            f"--pass-k {text!r}: a comma-separated list of integers", component="eval", field="--pass-k"
        ) from None
    return tuple(values)


def _settings(args: argparse.Namespace):
    from rollgate.core.errors import BadRequest
    from rollgate.core.settings import Settings

    model = {k: v for k, v in {"backend": args.backend, "model_path": args.model_path}.items() if v is not None}
    agent = {k: v for k, v in {"max_turns": args.max_turns}.items() if v is not None}
    settings = Settings.load(args.config, redis_url=args.redis_url, model=model or None, agent=agent or None)
    if args.model and args.gateway:
        raise BadRequest("--model applies to the embedded stack, not to --gateway", component="eval", field="--model")
    apply_model_flag(settings, args, "eval")
    settings.envs = list(args.env)
    return settings


def _run_eval(args: argparse.Namespace) -> int:
    from rollgate.core.errors import BadRequest
    from rollgate.core.eval_metrics import MetricConfig
    from rollgate.evaluation.report import summary_table
    from rollgate.evaluation.run import EvalOptions, run_eval
    from rollgate.evaluation.sources import GatewaySource, StackSource

    for flag in ("k", "out"):
        if getattr(args, flag) is None:
            raise BadRequest(f"--{flag} is required", component="eval", field=f"--{flag}")
    settings = _settings(args)
    sampling = {
        k: v
        for k, v in {
            "temperature": args.temperature,
            "top_p": args.top_p,
            "max_output_tokens": args.max_output_tokens,
        }.items()
        if v is not None
    }
    opts = EvalOptions(
        envs=list(args.env),
        out=Path(args.out),
        k=args.k,
        metrics=MetricConfig(
            k=args.k,
            pass_k=_pass_k(args.pass_k, args.k),
            threshold=args.threshold,
            resamples=args.bootstrap_resamples,
            seed=args.bootstrap_seed,
        ),
        tasks_file=Path(args.tasks) if args.tasks else None,
        n=args.n,
        seed=args.seed,
        split=args.split,
        max_failure_fraction=args.max_failure_fraction,
        resume=args.resume,
        train_tasks=Path(args.train_tasks) if args.train_tasks else None,
        strict=args.strict,
        sampling=sampling,
        policy_version=args.policy_version,
    )
    games = eval_games.multi_role_source(args, settings)
    if games is not None:  # a game: each role's win / draw / loss rates (docs/roles.md)
        return eval_games.run_self_play(args, games, sampling)
    if args.gateway:
        source = GatewaySource(args.gateway, api_key=args.api_key or settings.api_key)
    else:
        source = StackSource(settings, opts.envs, concurrency=args.concurrency)
    with progress("sample", disable=args.no_progress) as (on_total, advance):
        try:
            result = run_eval(opts, source, on_total=on_total, on_sample=advance)
        except KeyboardInterrupt:
            print(f"interrupted; {opts.out}/samples.jsonl keeps what finished: re-run with --resume", file=sys.stderr)
            return 130
    if result.skipped_rows:
        print(f"{result.skipped_rows} task rows of other environments were skipped", file=sys.stderr)
    if result.overlap:
        print(
            f"warning: {len(result.overlap)} eval task(s) also appear in --train-tasks (listed in report.json)",
            file=sys.stderr,
        )
    print(summary_table(result.report))
    print(f"report: {opts.out / 'report.json'}  {opts.out / 'report.html'}", file=sys.stderr)
    check = result.report["failure_check"]
    if result.exit_code:
        print(
            f"rollgate eval: {check['failure_fraction']:.1%} of samples failed, above --max-failure-fraction "
            f"{check['max_failure_fraction']:g}",
            file=sys.stderr,
        )
    return result.exit_code


def _compare(args: argparse.Namespace) -> int:
    from rollgate.core import jsonutil
    from rollgate.core.errors import BadRequest

    if args.h2h_env:
        if args.cmp_threshold is not None:
            raise BadRequest(
                "--threshold applies to two evaluation directories; games are won, drawn or lost",
                component="eval",
                field="--threshold",
            )
        return eval_games.run(args)
    given = eval_games.given_flags(args)
    if given:
        raise BadRequest(
            f"{given[0]} applies to head-to-head games: add --env GAME (A and B then name policies)",
            component="eval",
            field=given[0],
        )
    from rollgate.evaluation.compare import compare, compare_table

    result = compare(
        Path(args.a), Path(args.b), threshold=args.cmp_threshold, resamples=args.cmp_resamples, seed=args.cmp_seed
    )
    print(compare_table(result))
    if args.cmp_out:
        Path(args.cmp_out).write_bytes(jsonutil.dumps(result))
    return 0


def _play(args: argparse.Namespace) -> int:
    from rollgate.core import jsonutil
    from rollgate.evaluation.play import play_report, play_table, read_trajectories

    src = Path(args.src)
    if not src.is_file():
        print(f"rollgate eval play: {src}: no such file", file=sys.stderr)
        return 2
    report = play_report(read_trajectories(src), resamples=args.play_resamples, seed=args.play_seed)
    print(play_table(report))
    if args.play_out:
        Path(args.play_out).write_bytes(jsonutil.dumps(report))
    return 0


def _reverify(args: argparse.Namespace) -> int:
    from rollgate.core.settings import Settings
    from rollgate.evaluation.report import summary_table
    from rollgate.evaluation.reverify import reverify

    result = reverify(Path(args.src), Path(args.rv_out), Settings.load(args.rv_config), threshold=args.rv_threshold)
    print(summary_table(result.report))
    print(f"{len(result.changed)} samples changed reward:")
    for c in result.changed:
        print(f"  {c['env']}/{c['task_id']} #{c['sample_index']}: {c['old_reward']} -> {c['new_reward']}")
    if result.errors:
        print(f"{len(result.errors)} samples could not be re-verified (reported as failures):", file=sys.stderr)
        for e in result.errors[:20]:
            print(f"  {e['env']}/{e['task_id']} #{e['sample_index']}: {e['error']}", file=sys.stderr)
    print(f"report: {Path(args.rv_out) / 'report.json'}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    from rollgate.core.errors import BadRequest, NotFound, RollgateError
    from rollgate.core.logging import setup_logging

    setup_logging("WARNING")
    action = {"compare": _compare, "reverify": _reverify, "play": _play}.get(args.eval_action or "", _run_eval)
    try:
        return action(args)
    except RollgateError as exc:
        print(f"rollgate eval: {exc.message}" + (f" (field {exc.field})" if exc.field else ""), file=sys.stderr)
        return 2 if isinstance(exc, (BadRequest, NotFound)) else 1
