"""`rollgate eval compare A B --env GAME`: the head-to-head form of `eval compare`, where A and B
are policies that play each other (rollgate.evaluation.headtohead). Its flags carry dests of their
own (h2h_*): a subcommand's defaults would otherwise overwrite what was given before `compare`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rollgate.commands.progress import progress


def add_flags(c: argparse.ArgumentParser) -> None:
    g = c.add_argument_group(
        "head to head (with --env: A and B are policies: a model name, a JSON object such as "
        '\'{"model": "ckpt-100", "sampling": {"temperature": 0.7}}\', or a JSON/YAML file holding one)'
    )
    g.add_argument("--env", dest="h2h_env", metavar="GAME", help="a multi-role environment, e.g. textarena/TicTacToe")
    g.add_argument("--tasks", dest="h2h_tasks", metavar="FILE", help="task rows (JSONL) of the game")
    g.add_argument("--n", dest="h2h_n", type=int, metavar="N", help="generate N tasks (needs --seed)")
    g.add_argument("--seed", dest="h2h_seed", type=int, metavar="S", help="seed of the generated tasks")
    g.add_argument(
        "--games",
        dest="h2h_games",
        type=int,
        default=1,
        metavar="G",
        help="games per task and seating (default 1: each task played twice, A in each seat once)",
    )
    g.add_argument(
        "--seats",
        dest="h2h_seats",
        metavar="A_ROLE,B_ROLE",
        help="pin A and B to one role each instead of swapping (an asymmetric pair, e.g. solver,grader)",
    )
    g.add_argument(
        "--trajectories", dest="h2h_trajectories", metavar="FILE", help="append every role's trajectory here (JSONL)"
    )
    g.add_argument("--gateway", dest="h2h_gateway", metavar="URL", help="a running gateway; default: in process")
    g.add_argument("--api-key", dest="h2h_api_key", metavar="KEY", help="bearer token of the gateway")
    g.add_argument("--backend", dest="h2h_backend", choices=["local", "vllm", "openai", "scripted"])
    g.add_argument("--model-path", dest="h2h_model_path", metavar="DIR", help="the local backend's model (embedded)")
    g.add_argument("--max-turns", dest="h2h_max_turns", type=int, metavar="N", help="model calls per role and game")
    g.add_argument("--concurrency", dest="h2h_concurrency", type=int, metavar="N", help="games at once (embedded)")
    g.add_argument("--config", dest="h2h_config", metavar="FILE", help="YAML settings (e.g. role_models)")
    g.add_argument("--no-progress", dest="h2h_no_progress", action="store_true", help="no progress bar")


def given_flags(args: argparse.Namespace) -> list[str]:
    """The head-to-head flags given (a paired comparison takes none of them)."""
    return [
        "--" + k.removeprefix("h2h_").replace("_", "-")
        for k, v in vars(args).items()
        if k.startswith("h2h_") and v not in (None, False) and not (k == "h2h_games" and v == 1)
    ]


def run(args: argparse.Namespace) -> int:
    from rollgate.core import jsonutil
    from rollgate.core.settings import Settings
    from rollgate.evaluation.games import GatewayGames, HeadToHeadOptions, StackGames, head_to_head
    from rollgate.evaluation.headtohead import head_to_head_table

    model = {k: v for k, v in {"backend": args.h2h_backend, "model_path": args.h2h_model_path}.items() if v}
    agent = {"max_turns": args.h2h_max_turns} if args.h2h_max_turns else None
    settings = Settings.load(args.h2h_config or args.config, redis_url=args.redis_url, model=model or None, agent=agent)
    opts = HeadToHeadOptions(
        env=args.h2h_env,
        a=args.a,
        b=args.b,
        tasks_file=Path(args.h2h_tasks) if args.h2h_tasks else None,
        n=args.h2h_n,
        seed=args.h2h_seed,
        games=args.h2h_games,
        seats=args.h2h_seats,
        trajectories=Path(args.h2h_trajectories) if args.h2h_trajectories else None,
        resamples=args.cmp_resamples,
        bootstrap_seed=args.cmp_seed,
    )
    if args.h2h_gateway:
        source: StackGames | GatewayGames = GatewayGames(args.h2h_gateway, api_key=args.h2h_api_key or settings.api_key)
    else:
        source = StackGames(settings, opts.env, concurrency=args.h2h_concurrency)
    with progress("game", disable=args.h2h_no_progress) as (on_total, advance):
        report = head_to_head(opts, source, on_total=on_total, on_game=advance)
    print(head_to_head_table(report))
    if args.cmp_out:
        Path(args.cmp_out).write_bytes(jsonutil.dumps(report))
    return 0


def multi_role_source(args: argparse.Namespace, settings):
    """The games source when an --env of plain `rollgate eval` has roles (else None)."""
    from rollgate.core.errors import RollgateError
    from rollgate.evaluation.games import GatewayGames, StackGames

    for env in args.env:
        if args.gateway:
            source = GatewayGames(args.gateway, api_key=args.api_key or settings.api_key)
        else:
            source = StackGames(settings, env, concurrency=args.concurrency)
        try:
            roles = source.roles(env)
        except RollgateError:
            continue  # an unknown environment: `rollgate eval` names it
        if roles:
            return source
    return None


def run_self_play(args: argparse.Namespace, source, sampling: dict) -> int:
    """`rollgate eval --env GAME`: the model in every seat, each role's win / draw / loss rates."""
    from rollgate.core import jsonutil
    from rollgate.core.errors import BadRequest
    from rollgate.evaluation.games import HeadToHeadOptions, self_play
    from rollgate.evaluation.play import play_table

    if len(args.env) > 1:
        raise BadRequest(
            "--env: a multi-role environment is evaluated on its own (one --env)", component="eval", field="--env"
        )
    for flag, value in (("--resume", args.resume), ("--train-tasks", args.train_tasks), ("--split", args.split)):
        if value:
            raise BadRequest(f"{flag} applies to single-role environments", component="eval", field=flag)
    out = Path(args.out)
    if (out / "trajectories.jsonl").exists():
        raise BadRequest(
            f"--out {out} already holds trajectories.jsonl: choose another --out", component="eval", field="--out"
        )
    out.mkdir(parents=True, exist_ok=True)
    policy = jsonutil.dumps({"sampling": sampling, "policy_version": args.policy_version}).decode()
    opts = HeadToHeadOptions(
        env=args.env[0],
        a=policy,
        b=policy,
        tasks_file=Path(args.tasks) if args.tasks else None,
        n=args.n,
        seed=args.seed,
        games=args.k,
        trajectories=out / "trajectories.jsonl",
        resamples=args.bootstrap_resamples,
        bootstrap_seed=args.bootstrap_seed,
    )
    with progress("game", disable=args.no_progress) as (on_total, advance):
        report = self_play(opts, source, on_total=on_total, on_game=advance)
    (out / "play.json").write_bytes(jsonutil.dumps(report))
    print(f"{report['env']}: {report['model']['model']} in every seat (self-play), {args.k} games per task")
    print(play_table(report))
    print(
        f"report: {out / 'play.json'}  {out / 'trajectories.jsonl'}; two policies against each other: "
        "rollgate eval compare A B --env GAME",
        file=sys.stderr,
    )
    return 0
