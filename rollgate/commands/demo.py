"""`rollgate demo`: the first run. Serves a trained model (the `tiny-math-demo` recipe's SFT phase
on math demonstrations: the checkpoint shipped with Rollgate, or with --rebuild built here once and
cached in Rollgate's home; `--untrained`: the
untrained tiny model, built if missing; `--model NAME`: a registry model such as
smollm2-135m-instruct as it is, greedy, fetched once), collects a few rollouts of each shipped
environment's examples and of a few reasoning_gym datasets (when reasoning-gym is installed: rows
generated on the spot, `rollgate tasks`) on the embedded stack, and prints a per-environment summary.

Example rows are read from, in order: --examples DIR; `examples/` beside the installed package
(a source checkout or an editable install); `rollgate/examples/` inside the package (a wheel that
ships them as package data)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from importlib import resources
from pathlib import Path
from typing import Any

from rollgate.commands.serve import add_common_flags, add_model_flag, apply_model_flag
from rollgate.core.settings import Settings

# Small by default: the demo should finish in a couple of minutes on a 2-core laptop.
DEFAULT_TASKS_PER_ENV = 3
DEFAULT_MAX_OUTPUT_TOKENS = 32
DEFAULT_MAX_TURNS = 3
# The trained checkpoint `--trained` serves (built once into <home>/<recipe>-model); its
# tool calls and answers take up to ~45 tokens a turn, more than the untrained model's budget.
DEMO_RECIPE = "tiny-math-demo"
DEMO_RECIPE_ENV = "math"
DEMO_TRAINED_MIN_TOKENS = 64
# --model NAME: a pretrained chat model spends more tokens on an answer than the tiny policy, and
# its calls run on this machine's CPU, all episodes at once: a call that waits minutes for its turn
# on a loaded laptop is load, not a hung server, so the demo gives each call this long
DEMO_NAMED_MIN_TOKENS = 64
DEMO_NAMED_MODEL_TIMEOUT_S = 600.0
DEMO_NAMED_TASKS_PER_ENV = 1  # a 135M-parameter model is slow on a CPU: a rollout costs CPU-minutes
# quick to generate and to score; shown when the `envs` extra is installed
DEMO_GENERATED_ENVS = ("reasoning_gym/chain_sum", "reasoning_gym/letter_counting", "reasoning_gym/spell_backward")


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tasks-per-env",
        type=int,
        default=None,
        metavar="N",
        help=f"tasks per environment (default {DEFAULT_TASKS_PER_ENV}, {DEMO_NAMED_TASKS_PER_ENV} with --model)",
    )
    p.add_argument("--envs", metavar="A,B", help="environments to run (default: every one with examples)")
    p.add_argument(
        "--max-output-tokens",
        type=int,
        default=DEFAULT_MAX_OUTPUT_TOKENS,
        metavar="N",
        help=f"per model call (default {DEFAULT_MAX_OUTPUT_TOKENS})",
    )
    p.add_argument("--max-turns", type=int, default=DEFAULT_MAX_TURNS, help=f"default {DEFAULT_MAX_TURNS}")
    p.add_argument("--examples", metavar="DIR", help="directory of <env>.jsonl example rows")
    p.add_argument("--out", metavar="FILE", help="trajectories file (default: <home>/demo/rollouts.jsonl)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_flag(p)
    trained = p.add_mutually_exclusive_group()
    trained.add_argument(
        "--trained",
        dest="trained",
        action="store_true",
        default=True,
        help=f"serve the math policy trained by the {DEMO_RECIPE} recipe's SFT phase, sampled greedily (the "
        "default: the checkpoint shipped with Rollgate)",
    )
    trained.add_argument(
        "--untrained",
        dest="trained",
        action="store_false",
        help="serve the untrained tiny model instead (rewards about 0; nothing to build)",
    )
    p.add_argument(
        "--rebuild",
        action="store_true",
        help=f"train the {DEMO_RECIPE} policy on this machine instead of serving the shipped checkpoint "
        "(about 4 minutes on 2 cores; cached in Rollgate's home, later runs reuse it)",
    )
    add_common_flags(p)


def trained_model(settings: Settings, src: Path, *, rebuild: bool = False) -> Path:
    """The demo recipe's SFT checkpoint: the one shipped with Rollgate while it matches the recipe
    and the demo's rows (and `rebuild` is off); else Rollgate's home's, built once (printing what it
    does), then reused. The demo's own example rows are kept out of its training data, so what the
    summary scores is held out."""
    from rollgate.trainer_adapters.recipes import get_recipe
    from rollgate.trainer_adapters.recipes.demo_model import SHIPPED, ensure_sft_model, is_current

    cfg = get_recipe(DEMO_RECIPE)
    exclude = demo_exclusions(src)
    if not rebuild and is_current(SHIPPED, cfg, exclude):
        print(
            f"model: {SHIPPED} (the {DEMO_RECIPE} recipe's SFT checkpoint, shipped with Rollgate; "
            "--rebuild trains it on this machine)",
            file=sys.stderr,
        )
        return SHIPPED
    path = Path(settings.home) / f"{DEMO_RECIPE}-model"
    print(f"model: {path} (the {DEMO_RECIPE} recipe's SFT checkpoint, built now if missing)", file=sys.stderr)

    def say(line: str) -> None:
        print(f"  {line}", file=sys.stderr)

    _, built = ensure_sft_model(cfg, path, exclude_keys=exclude, progress=say)
    if built:
        say(f"built and cached in {path}: later demos reuse it")
    return path


def demo_exclusions(src: Path) -> set[str]:
    """The demo's math example rows by content: kept out of the demo policy's training data."""
    from rollgate.core import jsonutil
    from rollgate.resources_servers.families.splits import row_key

    rows_file = src / f"{DEMO_RECIPE_ENV}.jsonl"
    rows = [jsonutil.loads(r) for r in rows_file.read_bytes().splitlines() if r.strip()] if rows_file.is_file() else []
    return {row_key(DEMO_RECIPE_ENV, r) for r in rows}


def examples_dir(explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    import rollgate

    beside = Path(rollgate.__file__).resolve().parent.parent / "examples"
    if beside.is_dir():
        return beside
    packaged = resources.files("rollgate").joinpath("examples")
    if packaged.is_dir():
        return Path(str(packaged))
    return None


def build_task_file(src: Path, envs: list[str], per_env: int, dest: Path) -> dict[str, int]:
    """Example rows of each environment: from <src>/<env>.jsonl, else from its task generator."""
    from rollgate.core import jsonutil
    from rollgate.resources_servers.registry import default_registry

    counts: dict[str, int] = {}
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as out:
        for env in envs:
            path = src / f"{env}.jsonl"
            if not path.is_file():
                rows = default_registry().get(env).tasks(per_env, 0, None, "train")
                out.writelines(jsonutil.dumps(row) + b"\n" for row in rows)
                counts[env] = len(rows)
                continue
            n = 0
            for raw in path.read_bytes().splitlines():
                if n >= per_env:
                    break
                if raw.strip():
                    row = jsonutil.loads(raw)
                    row.setdefault("env", env)
                    out.write(jsonutil.dumps(row) + b"\n")
                    n += 1
            counts[env] = n
    return counts


def summarise(records: list[dict[str, Any]], elapsed: float) -> str:
    by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_env[r["task"]["env"]].append(r)
    w = max([12, *(len(e) for e in by_env)])
    lines = [
        f"{'environment':<{w}} {'n':>3} {'mean reward':>11} {'tokens in':>9} {'tokens out':>10} "
        f"{'s/rollout':>9}  outcomes"
    ]
    for env in sorted(by_env):
        rs = by_env[env]
        rewards = [r["reward"] for r in rs if r.get("reward") is not None]
        mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "n/a"
        tokens_out = sum(len(t["generation_token_ids"]) for r in rs for t in r.get("turns", []))
        tokens_in = sum(len(t["prompt_token_ids"]) for r in rs for t in r.get("turns", []))
        latency = sum(r.get("timings", {}).get("total_s", 0.0) for r in rs) / len(rs)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(Counter(r["outcome"] for r in rs).items()))
        lines.append(f"{env:<{w}} {len(rs):>3} {mean:>11} {tokens_in:>9} {tokens_out:>10} {latency:>9.2f}  {outcomes}")
    rate = len(records) / elapsed if elapsed > 0 else 0.0
    lines.append(f"{len(records)} rollouts in {elapsed:.1f}s: {rate:.2f} rollouts/s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from rollgate.client.collector import collect, failures_path
    from rollgate.client.gateway import RolloutClient
    from rollgate.commands.collect import gateway_url
    from rollgate.core import jsonutil
    from rollgate.core.logging import setup_logging
    from rollgate.resources_servers.registry import default_registry

    settings = Settings.load(args.config, redis_url=args.redis_url)
    setup_logging("WARNING", json_logs=settings.log_json)
    src = examples_dir(args.examples)
    if src is None:
        print(
            "rollgate demo: no example rows found; pass --examples DIR (a directory of <env>.jsonl files)",
            file=sys.stderr,
        )
        return 2
    specs = default_registry().specs()
    generated = [e for e in DEMO_GENERATED_ENVS if e in specs and specs[e].available]
    # multi-role environments need a policy per role (docs/roles.md): not in the default list
    single = [e for e, spec in specs.items() if "/" not in e and not spec.env_class.roles]
    wanted = args.envs.split(",") if args.envs else [*single, *generated]
    envs = [
        e
        for e in wanted
        if (src / f"{e}.jsonl").is_file() or (e in specs and specs[e].available and specs[e].tasks is not None)
    ]
    if not envs:
        print(f"rollgate demo: no examples for {', '.join(wanted)} in {src}", file=sys.stderr)
        return 2
    settings.envs = envs
    sampling: dict[str, Any] = {}
    if args.model:
        # a named model is served as it is (untrained), greedy, with room for a real model's answers
        print(f"model: {args.model} (fetched and converted now if missing)", file=sys.stderr)
        apply_model_flag(settings, args, "demo")
        args.max_output_tokens = max(args.max_output_tokens, DEMO_NAMED_MIN_TOKENS)
        sampling["temperature"] = 0.0
    elif settings.model.backend == "local":
        from rollgate.model_server.tiny import ensure_tiny_model

        if not args.trained or settings.model.model_path != settings.default_model_path or DEMO_RECIPE_ENV not in envs:
            print(f"model: {settings.model.model_path} (built now if missing)", file=sys.stderr)
            ensure_tiny_model(settings.model.model_path)
        else:
            settings.model.model_path = str(trained_model(settings, src, rebuild=args.rebuild))
            args.max_output_tokens = max(args.max_output_tokens, DEMO_TRAINED_MIN_TOKENS)
            sampling["temperature"] = 0.0  # greedy: what the model learned, as its recipe measures it
    settings.agent.max_turns = args.max_turns
    if args.model:
        agent = settings.agent
        agent.model_timeout_s = max(agent.model_timeout_s, DEMO_NAMED_MODEL_TIMEOUT_S)
        agent.episode_timeout_s = max(agent.episode_timeout_s, DEMO_NAMED_MODEL_TIMEOUT_S * (args.max_turns + 1))
    settings.agent.max_output_tokens_per_call = args.max_output_tokens
    settings.agent.max_output_tokens = args.max_output_tokens * args.max_turns
    home = Path(settings.home) / "demo"
    tasks = home / "tasks.jsonl"
    out = Path(args.out) if args.out else home / "rollouts.jsonl"
    per_env = args.tasks_per_env
    if per_env is None:
        per_env = DEMO_NAMED_TASKS_PER_ENV if args.model else DEFAULT_TASKS_PER_ENV
    counts = build_task_file(src, envs, per_env, tasks)
    out.unlink(missing_ok=True)  # a demo always collects afresh
    print(
        f"collecting {sum(counts.values())} rollouts over {', '.join(envs)} on the embedded stack...", file=sys.stderr
    )
    ns = argparse.Namespace(gateway=None, concurrency=None)
    from tqdm import tqdm

    bar = tqdm(total=0, unit="rollout", file=sys.stderr, disable=args.no_progress, dynamic_ncols=True)
    with gateway_url(ns, settings) as url, RolloutClient(url, api_key=settings.api_key) as client:
        started = time.monotonic()
        stats = collect(
            client,
            tasks,
            out,
            sampling={**sampling, "max_output_tokens": args.max_output_tokens},
            policy_version="demo",
            on_total=lambda n: bar.reset(total=n),
            on_record=lambda r, s: bar.update(1),
        )
        elapsed = time.monotonic() - started
    bar.close()
    records = [jsonutil.loads(line) for line in out.read_bytes().splitlines() if line.strip()]
    print(summarise(records, elapsed))
    print(f"trajectories: {out}")
    if stats.failures:
        print(f"failures: {failures_path(out)} ({stats.failures})")
    # The demo's own server is gone once it returns: the hint starts one that stays.
    print(
        "next: `rollgate serve --port 8000`, then `rollgate collect --tasks "
        f"{tasks} --out rollouts.jsonl --gateway http://127.0.0.1:8000` and open "
        "http://127.0.0.1:8000/ui to browse the trajectories in the viewer"
    )
    return 0
