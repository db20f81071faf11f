"""`rollgate collect`: rollouts for a task file into a JSONL file, through a gateway or through
an embedded stack started in this process."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from rollgate.commands.serve import add_common_flags, add_model_flag, apply_model_flag
from rollgate.core.settings import Settings

log = logging.getLogger("rollgate.collect")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tasks",
        required=True,
        metavar="FILE",
        help="task rows, one JSON object per line (NeMo Gym rows accepted unchanged)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="trajectories are appended here (JSONL); failures go to FILE.failures.jsonl. "
        "Re-running skips task ids that already have their trajectories in FILE",
    )
    p.add_argument("--env", metavar="NAME", help="environment of rows that name none")
    p.add_argument("--repeats", type=int, default=1, metavar="K", help="samples per task (default 1)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="episodes run at once by the embedded stack (default: settings.agent.concurrency); "
        "with --gateway the server's workers decide",
    )
    p.add_argument("--gateway", metavar="URL", help="a running gateway; default: start the embedded stack here")
    add_model_flag(p)
    p.add_argument("--api-key", metavar="KEY", help="bearer token of the gateway (default: ROLLGATE_API_KEY)")
    p.add_argument("--policy-version", metavar="V", help="recorded on every trajectory")
    p.add_argument(
        "--agent",
        metavar="NAME",
        help="the agent that runs the episodes: the shipped loop (default), a black-box harness such as "
        "smolagents, or a plugin or settings entry (docs/agents.md; GET /v1/agents lists them)",
    )
    p.add_argument(
        "--roles",
        metavar="JSON|FILE",
        help="a multi-role environment: each role -> its policy, as a JSON object or a JSON/YAML file, e.g. "
        '\'{"player_0": {"policy_version": "a"}, "player_1": {"model": "other", "sampling": {"temperature": 0.7}}}\' '
        "(docs/roles.md)",
    )
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature override")
    p.add_argument(
        "--max-output-tokens", type=int, default=None, metavar="N", help="per model call, overrides the rows' value"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="WARNING",
        help="what this command logs to stderr (default WARNING: the progress bar stays readable)",
    )
    add_common_flags(p)


@contextlib.contextmanager
def gateway_url(args: argparse.Namespace, settings: Settings) -> Iterator[str]:
    """The gateway to use: --gateway, or an embedded stack served on a loopback port meanwhile."""
    if args.gateway:
        yield args.gateway
        return
    from rollgate.core.serving import listening_socket, serve_in_thread
    from rollgate.stack.embedded import build_app

    settings = settings.model_copy(deep=True)  # the stack's own settings: the caller's stay as they were
    if args.concurrency:
        settings.agent.concurrency = args.concurrency
    log.info("starting the embedded stack (model backend %s)", settings.model.backend)
    # The server's own socket, bound to any free port now: its port is known before the app is built
    # (harness agents are told where to call it) and stays the server's until it stops.
    with listening_socket("127.0.0.1", 0) as sock:
        settings.host, settings.port = "127.0.0.1", sock.getsockname()[1]
        with serve_in_thread(build_app(settings), sock=sock, timeout_s=600) as url:
            yield url


def _summary_line(stats, elapsed: float) -> str:
    mean = f"{stats.mean_reward:.3f}" if stats.mean_reward is not None else "n/a"
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items())) or "none"
    rate = stats.trajectories / elapsed if elapsed > 0 else 0.0
    return (
        f"{stats.trajectories} trajectories ({outcomes}), mean reward {mean}, {stats.failures} failures, "
        f"{stats.skipped} tasks already done; {elapsed:.1f}s, {rate:.2f} rollouts/s"
    )


def rows_naming_another_env(tasks: Path, env: str) -> tuple[int, int, str] | None:
    """(how many rows name an environment other than `env`, the first one's line, its name)."""
    from rollgate.core import jsonutil

    count, first = 0, None
    with tasks.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            try:
                row = jsonutil.loads(raw) if raw.strip() else None
            except ValueError:
                continue  # reported per row by collect itself
            named = row.get("env") if isinstance(row, dict) else None
            if isinstance(named, str) and named != env:
                count += 1
                first = first or (line_no, named)
    return (count, *first) if first else None


def load_roles(value: str | None) -> dict | None:
    """--roles: a JSON object, or a JSON or YAML file holding one (checked by the gateway)."""
    if not value:
        return None
    import yaml

    text = Path(value).read_text() if not value.lstrip().startswith("{") and Path(value).is_file() else value
    try:
        roles = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        raise ValueError(f"not JSON or YAML: {exc}") from None
    if not isinstance(roles, dict) or not roles:
        raise ValueError("must be an object mapping each role to its policy (or a file holding one)")
    return roles


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rollgate.client.collector import collect, failures_path
    from rollgate.client.gateway import RolloutClient
    from rollgate.core.errors import RollgateError
    from rollgate.core.logging import setup_logging

    settings = Settings.load(args.config, redis_url=args.redis_url)
    setup_logging(args.log_level, json_logs=settings.log_json)
    tasks, out = Path(args.tasks), Path(args.out)
    if args.model and args.gateway:
        print("rollgate collect: --model applies to the embedded stack, not to --gateway", file=sys.stderr)
        return 2
    apply_model_flag(settings, args, "collect")
    if not tasks.is_file():
        print(f"rollgate collect: --tasks {tasks}: no such file", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("rollgate collect: --repeats must be >= 1", file=sys.stderr)
        return 2
    if args.env and (other := rows_naming_another_env(tasks, args.env)):
        count, line, name = other
        print(
            f"rollgate collect: warning: {count} row(s) name an environment of their own (line {line}: {name!r}); "
            f"--env {args.env} applies only to rows that name none",
            file=sys.stderr,
        )
    try:
        roles = load_roles(args.roles)
    except ValueError as exc:
        print(f"rollgate collect: --roles: {exc}", file=sys.stderr)
        return 2
    sampling = {
        k: v
        for k, v in {"temperature": args.temperature, "max_output_tokens": args.max_output_tokens}.items()
        if v is not None
    }
    bar = tqdm(total=0, unit="rollout", file=sys.stderr, disable=args.no_progress, dynamic_ncols=True)

    def on_total(n: int) -> None:
        bar.reset(total=n)

    def on_record(_record, stats) -> None:
        mean = stats.mean_reward
        bar.set_postfix(reward=f"{mean:.3f}" if mean is not None else "n/a", failed=stats.failures, refresh=False)
        bar.update(1)

    started = time.monotonic()
    try:
        with gateway_url(args, settings) as url, RolloutClient(url, api_key=args.api_key or settings.api_key) as client:
            stats = collect(
                client,
                tasks,
                out,
                env=args.env,
                repeats=args.repeats,
                sampling=sampling,
                policy_version=args.policy_version,
                agent=args.agent,
                roles=roles,
                on_total=on_total,
                on_record=on_record,
            )
    except KeyboardInterrupt:
        bar.close()
        print(f"interrupted; re-run the same command to resume ({out} keeps what was collected)", file=sys.stderr)
        return 130
    except RollgateError as exc:
        bar.close()
        print(f"rollgate collect: {exc}", file=sys.stderr)
        return 1
    bar.close()
    print(_summary_line(stats, time.monotonic() - started), file=sys.stderr)
    print(f"trajectories: {out}" + (f"   failures: {failures_path(out)}" if stats.failures else ""), file=sys.stderr)
    return 0
