"""Where head-to-head games run (rollgate.evaluation.headtohead): in this process on the
composition root (rollgate.stack), or as rollout jobs with `roles` on a gateway. Both take the
games to play and call `on_result` once per game as it finishes (completion order)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollgate.core.errors import BadRequest, NotFound, ProtocolError
from rollgate.core.schemas import EpisodeRecord, FailureRecord, RolePolicy
from rollgate.core.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from rollgate.evaluation.headtohead import (
    SCHEMA_VERSION,
    Game,
    Played,
    check_games,
    check_policies,
    head_to_head_report,
    parse_policy,
    plan,
    seatings,
)
from rollgate.evaluation.play import play_report
from rollgate.evaluation.samples import COMPONENT
from rollgate.evaluation.sources import cancel_jobs, job_results
from rollgate.evaluation.tasks import EvalTask, check_envs, env_class, generate_tasks, load_task_file

log = logging.getLogger("rollgate.eval")

JOB = "eval-h2h"
PLAY_KIND = "rollgate.eval.play"
OnPlayed = Callable[[Played], None]


class StackGames:
    """Games on an in-process stack: the evaluated models are the stack's own model and the
    servers named in the setting `role_models`."""

    def __init__(self, settings: Any, env: str, *, concurrency: int | None = None):
        self.settings = settings
        self.env = env
        self.concurrency = concurrency or settings.agent.concurrency

    def known_envs(self) -> list[str]:
        from rollgate.resources_servers import registry

        return list(registry.env_names())

    def roles(self, env: str) -> tuple[str, ...]:
        return tuple(getattr(env_class(env), "roles", ()) or ())

    def models(self) -> tuple[str, list[str]]:
        """The default model's name, and every name a side may give."""
        own = self.settings.model.served_name
        return own, [own, *self.settings.role_models]

    def run(self, games: Sequence[Game], policies: dict[str, RolePolicy], on_result: OnPlayed) -> None:
        if games:
            asyncio.run(self._run(games, policies, on_result))

    async def _run(self, games: Sequence[Game], policies: dict[str, RolePolicy], on_result: OnPlayed) -> None:
        from rollgate.agent_server.agent import RunContext
        from rollgate.core.rows import Task, group_id
        from rollgate.stack import local_stack

        stack = local_stack(self.settings, envs=[self.env])
        if self.env not in stack.runtimes or stack.agents is None:
            await stack.aclose()
            raise BadRequest(f"environment {self.env!r} could not be loaded", component=COMPONENT, field="--env")
        agents = stack.agents
        pending: Iterator[Game] = iter(games)

        async def worker() -> None:
            for game in pending:  # workers share one iterator: at most `concurrency` in flight
                t = game.task
                ctx = RunContext(
                    job_id=JOB,
                    group_id=group_id(t.task_id, job_id=JOB, row_index=None),
                    sample_index=game.index,
                    roles=game.roles(policies),
                )
                try:
                    record = await agents.run(Task.trusted(t.row, task_id=t.task_id, env=t.env), ctx)
                except (BadRequest, NotFound):
                    raise  # the caller's mistake (a policy the loop refuses): stop and say so
                except Exception as exc:  # noqa: BLE001 - every game must yield a record
                    log.warning("game %s of %s failed: %s: %s", game.index, t.task_id, type(exc).__name__, exc)
                    on_result(Played(game, None, "env_error"))
                    continue
                assert isinstance(record, EpisodeRecord)
                on_result(Played(game, record))

        try:
            await asyncio.gather(*(worker() for _ in range(max(1, min(self.concurrency, len(games))))))
        finally:
            await stack.aclose()


class GatewayGames:
    """Games as evaluation jobs with roles on a gateway (`purpose: "eval"`): one job per seating
    (each task a row, its games the job's repeats), its `episode` records streamed back and mapped
    onto the games. The gateway keeps each job's per-role report and shows it in its summary."""

    def __init__(self, url: str, *, api_key: str | None = None):
        self.url = url
        self.api_key = api_key
        self.job_ids: list[str] = []  # the evaluation jobs submitted (GET /v1/rollouts/{job}/report)

    def _client(self):
        from rollgate.client.gateway import RolloutClient

        return RolloutClient(self.url, api_key=self.api_key)

    def known_envs(self) -> list[str]:
        with self._client() as client:
            return client.envs()

    def roles(self, env: str) -> tuple[str, ...]:
        with self._client() as client:
            return tuple(client.env_roles(env))

    def models(self) -> tuple[str, list[str]] | None:
        return None  # the gateway checks each role's model at submission

    def run(self, games: Sequence[Game], policies: dict[str, RolePolicy], on_result: OnPlayed) -> None:
        jobs: dict[tuple[str, str], list[Game]] = {}
        for g in games:
            jobs.setdefault((g.a_role, g.b_role), []).append(g)
        with self._client() as client:
            submitted: list[tuple[str, list[Game], list[Any]]] = []
            try:
                for seated in jobs.values():
                    tasks = list({g.task.task_id: g.task for g in seated}.values())
                    repeats = max(g.index for g in seated) + 1
                    try:
                        job = client.submit(
                            [t.row for t in tasks],
                            repeats=repeats,
                            roles=seated[0].roles(policies),
                            purpose="eval",  # the gateway reports it per role, and in its summary
                            policy_version=_shared_version(policies),
                        )
                    except BadRequest as exc:
                        raise _side_error(exc, seated[0]) from None
                    submitted.append((job["job_id"], seated, tasks))
                    self.job_ids.append(job["job_id"])
                for job_id, seated, tasks in submitted:
                    self._stream(client, job_id, seated, tasks, on_result)
            except BaseException:
                cancel_jobs(client, [job_id for job_id, _, _ in submitted])
                raise

    @staticmethod
    def _stream(client, job_id: str, seated: list[Game], tasks: list[Any], on_result: OnPlayed) -> None:
        free = {(g.task.task_id, g.index): g for g in seated}
        for kind, rec, row in job_results(client, job_id, ("episode", "failure"), len(tasks)):
            task_id = tasks[row].task_id
            index = rec.get("sample_index")
            game = free.pop((task_id, index), None) if isinstance(index, int) else None
            if game is None:  # a failure record need not say which repeat it was: take a free one
                key = next((k for k in free if k[0] == task_id), None)
                if key is None:
                    raise ProtocolError(f"job {job_id}: more results than games for row {row}", component="gateway")
                game = free.pop(key)
            if kind == "failure":
                on_result(Played(game, None, FailureRecord.model_validate(rec).error.kind.value))
            else:
                on_result(Played(game, EpisodeRecord.model_validate(rec)))


def _shared_version(policies: dict[str, RolePolicy]) -> str | None:
    """The job's policy version: the one both sides share (self-play), else none (each role's
    own version rides on its policy)."""
    versions = {p.policy_version for p in policies.values()}
    return versions.pop() if len(versions) == 1 else None


def _side_error(exc: BadRequest, game: Game) -> BadRequest:
    """The gateway names `roles.<role>.<field>`: say which side sat there."""
    field = exc.field or ""
    for side, role in (("A", game.a_role), ("B", game.b_role)):
        prefix = f"roles.{role}"
        if field == prefix or field.startswith(prefix + "."):
            named = side + field[len(prefix) :]
            return BadRequest(f"{named} (seated as {role}): {exc.message}", component=COMPONENT, field=named)
    return exc


@dataclass
class HeadToHeadOptions:
    env: str
    a: str  # A's policy as given: a model name, a JSON object or a file (headtohead.parse_policy)
    b: str
    tasks_file: Path | None = None
    n: int | None = None
    seed: int | None = None
    games: int = 1  # per task and seating
    seats: str | None = None  # "A_ROLE,B_ROLE": no swapping
    trajectories: Path | None = None  # every role's trajectory of every game, as `collect --roles` writes them
    resamples: int = DEFAULT_RESAMPLES
    bootstrap_seed: int = DEFAULT_SEED


def _tasks(opts: HeadToHeadOptions) -> list[EvalTask]:
    if (opts.tasks_file is None) == (opts.n is None):
        raise BadRequest("give either --tasks FILE or --n N --seed S", component=COMPONENT, field="--tasks")
    if opts.tasks_file is not None:
        tasks, _ = load_task_file(opts.tasks_file, [opts.env])
    else:
        if opts.seed is None:
            raise BadRequest("--n needs --seed (the games must be reproducible)", component=COMPONENT, field="--seed")
        assert opts.n is not None
        tasks = generate_tasks([opts.env], opts.n, opts.seed, None)
    if not tasks:
        raise BadRequest(f"no task for {opts.env} in --tasks {opts.tasks_file}", component=COMPONENT, field="--tasks")
    return tasks


def head_to_head(
    opts: HeadToHeadOptions, source: StackGames | GatewayGames, *, on_total=None, on_game=None, every_seat=False
) -> dict[str, Any]:
    """Check the inputs (each error names its field), play the games, report A against B.
    `every_seat` (self-play): a game of more than two roles seats B's policy in the others too."""
    check_games(opts.games)
    policies = {"A": parse_policy(opts.a, "A"), "B": parse_policy(opts.b, "B")}
    check_envs([opts.env], source.known_envs())
    roles = source.roles(opts.env)
    others: tuple[str, ...] = ()
    if every_seat and len(roles) > 2:
        seats, others = [(roles[0], roles[1])], tuple(roles[2:])
    else:
        seats = seatings(opts.env, roles, opts.seats)
    models = source.models()
    if models is not None:
        check_policies(policies, models[1], models[0])
    games = plan(_tasks(opts), seats, opts.games, others)
    if on_total:
        on_total(len(games))
    played: list[Played] = []
    out = opts.trajectories.open("ab") if opts.trajectories else None

    def on_result(p: Played) -> None:
        played.append(p)
        if out is not None and p.record is not None:
            out.write(b"".join(t.model_dump_json(exclude_none=True).encode() + b"\n" for t in p.record.trajectories))
            out.flush()
        if on_game:
            on_game(p)

    try:
        source.run(games, policies, on_result)
    finally:
        if out is not None:
            out.close()
    default = models[0] if models is not None else _served_model(played, policies)
    report = head_to_head_report(
        opts.env,
        policies,
        default,
        played,
        planned=len(games),
        seats=seats,
        resamples=opts.resamples,
        seed=opts.bootstrap_seed,
    )
    if isinstance(source, GatewayGames):
        report["gateway_jobs"] = list(source.job_ids)
    return report


def _served_model(played: Sequence[Played], policies: dict[str, RolePolicy]) -> str:
    """The gateway's own model, as the trajectories of a side that names no model record it."""
    for p in played:
        for t in p.record.trajectories if p.record else ():
            side = "A" if t.role == p.game.a_role else "B"
            if policies[side].model is None:
                return t.policy.model
    return "the gateway's model"


def self_play(
    opts: HeadToHeadOptions, source: StackGames | GatewayGames, *, on_total=None, on_game=None
) -> dict[str, Any]:
    """`rollgate eval` on a multi-role environment: the evaluated policy (A, also B) in every
    seat, `games` episodes per task, and each role's win / draw / loss rates with intervals."""
    roles = source.roles(opts.env)
    if len(roles) == 2:
        opts.seats = ",".join(roles)  # one policy: swapping seats would only play each game twice
    trajectories = []

    def seen(p: Played) -> None:
        trajectories.extend(p.record.trajectories if p.record else ())
        if on_game:
            on_game(p)

    h2h = head_to_head(opts, source, on_total=on_total, on_game=seen, every_seat=True)
    play = play_report(trajectories, resamples=opts.resamples, seed=opts.bootstrap_seed)
    return {
        "kind": PLAY_KIND,
        "schema_version": SCHEMA_VERSION,
        "env": opts.env,
        "model": h2h["a"],
        "bootstrap": h2h["bootstrap"],
        "games": h2h["games"],
        "roles": play["roles"],
        "policies": {},
        "failures": h2h["games"]["without_result"],
        **({"gateway_jobs": h2h["gateway_jobs"]} if "gateway_jobs" in h2h else {}),
    }
