"""Multi-role episodes (docs/roles.md): several policies in one environment session, one
trajectory per role.

The environment says whose turn it is; this loop only follows it: observe the role to move
(its own view: rollgate.resources_servers.roles), call that role's model with that role's
history and tools, run the calls as that role, and go on with whoever's turn it is then. Each
role keeps its own Episode (history, token turns, budgets), so each role's prompts extend its
own previous token ids, exactly as in the single-role loop (rollgate.agent_server.agent), whose
model call this reuses. An infrastructure failure of any role ends the episode for every role
with the same typed error (naming the role): never a win or a loss.

A role may instead be played by a harness agent (a process of its own moving over MCP in step
mode): on its turns the loop only watches it (rollgate.agent_server.role_harness), and at the end
takes its capture record as that role's turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rollgate.agent_server import items as it
from rollgate.agent_server.agent import AGENT_NAME, Agent, RunContext, _within
from rollgate.agent_server.episode import Episode, EpisodeFailure, Phase, failure
from rollgate.agent_server.role_harness import (
    HarnessPlayer,
    RoleHarness,
    RolePlayers,
    finish_all,
    harness_turn,
    observe_into,
    take,
)
from rollgate.agent_server.role_policy import check_role_policy, check_roles
from rollgate.core.errors import BadRequest, NotFound
from rollgate.core.items import Item, output_text
from rollgate.core.logging import log_context
from rollgate.core.rows import Task, derive_seed, group_id
from rollgate.core.schemas import (
    EpisodeRecord,
    ErrorInfo,
    ErrorKind,
    Outcome,
    PolicyRef,
    RolePolicy,
    TaskRef,
    Trajectory,
    VerifyRequest,
    VerifyResult,
    new_id,
)
from rollgate.model_server.client import ModelClient
from rollgate.resources_servers.client import EnvClient

COMPONENT = "agent"
ZERO_SUM_TOLERANCE = 1e-6


def nudge(role: str, tools: list[str]) -> str:
    """What a role that answered in text on its turn is told: the turn is still its own."""
    return f"It is your turn ({role}): make your move by calling one of your tools: {', '.join(tools)}."


@dataclass
class Seat:
    """One role's side of the episode."""

    role: str
    policy: RolePolicy
    agent: Agent  # this role's model client and name (the loop's model call is reused)
    ep: Episode
    tool_names: list[str]
    request: dict[str, Any]
    sampling: dict[str, Any]
    verdict: VerifyResult | None = None
    player: HarnessPlayer | None = None  # a harness plays this role (rollgate.agent_server.role_harness)
    harness_metrics: dict[str, Any] | None = None
    segmented: bool = False


class RolesRunner:
    """Runs multi-role episodes with the models a worker can reach (`models`: name -> client)."""

    def __init__(self, base: Agent, models: Mapping[str, ModelClient], players: RolePlayers | None = None):
        self.base = base
        self.models = {base.model_name: base.model, **models}
        self.players = players  # the harness agents that can play a role (none: the loop only)

    def seat_agent(self, role: str, policy: RolePolicy) -> Agent:
        check_role_policy(role, policy, self.models, agents=self.players.names() if self.players else ())
        name = policy.model or self.base.model_name
        b = self.base
        return Agent(self.models[name], b.envs, b.settings, model_name=name, metrics=b.metrics)

    def seat_harness(self, role: str, policy: RolePolicy, ctx: RunContext) -> RoleHarness | None:
        if policy.agent in (None, AGENT_NAME) or self.players is None:
            return None
        try:
            harness = self.players.get(policy.agent)
        except BadRequest as exc:  # e.g. a stack without HTTP endpoints cannot run a harness
            raise BadRequest(
                f"roles.{role}.agent: {exc.message}", component=COMPONENT, field=f"roles.{role}.agent"
            ) from None
        harness.check_role(f"roles.{role}", policy, ctx.sampling)
        return harness

    async def run(self, task: Task, ctx: RunContext, policies: Mapping[str, RolePolicy]) -> EpisodeRecord:
        if task.env not in self.base.envs:
            raise BadRequest(
                f"unknown environment {task.env!r}; known: {', '.join(sorted(self.base.envs))}",
                component=COMPONENT,
                field="env",
            )
        env = self.base.envs[task.env]
        agents = {role: self.seat_agent(role, p) for role, p in policies.items()}
        harnesses = {role: h for role, p in policies.items() if (h := self.seat_harness(role, p, ctx)) is not None}
        episode_id = new_id("ep")
        started = time.monotonic()
        deadline = ctx.deadline or started + self.base.settings.episode_timeout_s
        seats: dict[str, Seat] = {}
        session: list[str] = []
        outcome, error = Outcome.completed, None
        m = self.base.metrics  # one episode (of several trajectories) in the episode metrics
        m.rollouts_started.labels(task.env).inc()
        m.in_flight.labels(task.env).inc()
        with log_context(job_id=ctx.job_id, task_id=task.task_id, env=task.env, episode_id=episode_id):
            try:
                outcome = await self._guarded(task, ctx, env, policies, (agents, harnesses), seats, session, deadline)
            except EpisodeFailure as f:
                outcome, error = f.outcome, f.error
            finally:
                await self._release(seats)
                if session:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(env.close(session[0], timeout_s=5.0))
                m.in_flight.labels(task.env).dec()
        m.rollouts_finished.labels(task.env, outcome.value).inc()
        total = time.monotonic() - started
        group = ctx.group_id or group_id(task.task_id, job_id=ctx.job_id, row_index=task.row_index)
        if not seats:  # failed before the seats were set: every role still gets its record
            seats = {r: self._empty_seat(r, p, agents[r], task, ctx, r in harnesses) for r, p in policies.items()}
        trajectories = [
            self._trajectory(s, task, ctx, group, episode_id, outcome, error, total) for s in seats.values()
        ]
        return EpisodeRecord(
            episode_id=episode_id,
            group_id=group,
            job_id=ctx.job_id,
            row_index=task.row_index,
            sample_index=ctx.sample_index,
            outcome=outcome,
            trajectories=trajectories,
        )

    async def _guarded(self, task, ctx, env, policies, agents, seats, session, deadline) -> Outcome:
        play = asyncio.ensure_future(self._episode(task, ctx, env, policies, agents, seats, session, deadline))
        waiters: set[asyncio.Future] = {play}
        cancel_wait = asyncio.ensure_future(ctx.cancel.wait()) if ctx.cancel is not None else None
        if cancel_wait is not None:
            waiters.add(cancel_wait)
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=max(0.0, deadline - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            play.cancel()
            raise
        finally:
            if cancel_wait is not None:
                cancel_wait.cancel()
        if play in done:
            return play.result()
        play.cancel()
        with contextlib.suppress(BaseException):
            await play
        if cancel_wait is not None and cancel_wait in done:
            info = ErrorInfo(kind=ErrorKind.cancelled, component=COMPONENT, message="the job was cancelled")
            raise EpisodeFailure(Outcome.cancelled, info)
        info = ErrorInfo(kind=ErrorKind.timeout, component=COMPONENT, message="episode exceeded its deadline")
        raise EpisodeFailure(Outcome.timeout, info)

    async def _episode(self, task, ctx, env: EnvClient, policies, parts, seats, session, deadline) -> Outcome:
        s = self.base.settings
        agents, harnesses = parts
        try:
            try:
                declared = await env.roles()
            except NotFound:  # a single-role environment has no GET /roles
                declared = {"roles": {}}
            if not declared["roles"]:
                raise BadRequest(
                    f"roles: {task.env} has a single role; a job with roles needs a multi-role environment",
                    component=COMPONENT,
                    field="roles",
                )
            check_roles(list(declared["roles"]), policies, env=task.env)
            all_tools = task.row.responses_create_params.get("tools") or await env.tools()
            seeded = await env.seed(task.row, timeout_s=s.seed_timeout_s)
        except BadRequest:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
            raise failure(exc, Phase.seed) from None
        session.append(seeded.session_id)
        for role, policy in policies.items():
            names = declared["roles"][role]
            tools = [t for t in all_tools if t.get("name") in names]
            seats[role] = self._seat(role, policy, agents[role], task, ctx, tools, names, seeded.session_id)
            if role in harnesses:
                seats[role].sampling = {}  # a harness chooses its own
                seats[role].player = harnesses[role].role_seat(
                    role, task, policy, session_id=seeded.session_id, tools=tools, ctx=ctx, deadline=deadline
                )
        turn = seeded.turn
        outcome = Outcome.completed
        while turn is not None:
            seat = seats[turn]
            if seat.player is not None:
                try:
                    turn, stopped = await harness_turn(
                        seat.player, seat.ep, env, seeded.session_id, seat.role, _within(s.tool_timeout_s, deadline)
                    )
                except EpisodeFailure as f:
                    f.error.message = f"role {seat.role}: {f.error.message}"
                    raise
                if stopped:  # it exited while it was its turn, or ran out of budget
                    outcome = Outcome.truncated
                    break
                continue
            if seat.ep.counters.turns >= s.max_turns or seat.ep.counters.output_tokens >= s.max_output_tokens:
                outcome = Outcome.truncated  # one role's budget ran out: the game stops unfinished
                break
            try:
                turn, over = await self._move(seat, task, env, seeded.session_id, deadline)
            except EpisodeFailure as f:
                f.error.message = f"role {seat.role}: {f.error.message}"
                raise
            if over:
                outcome = Outcome.truncated
                break
        await self._release(seats, strict=True)  # every harness stopped; a crash fails the episode
        for seat in seats.values():  # each role reads how it ended, then gets its own verdict
            if seat.player is not None and seat.player.started:
                continue  # its MCP calls showed it every move
            with contextlib.suppress(Exception):
                view = await env.observe(seeded.session_id, seat.role, timeout_s=s.tool_timeout_s)
                if view.observation:
                    seat.ep.add_input([{"role": "user", "content": view.observation}])
        await self._verify(env, seats, seeded.session_id, session, zero_sum=bool(declared.get("zero_sum")))
        return outcome

    async def _move(self, seat: Seat, task: Task, env: EnvClient, sid: str, deadline: float) -> tuple[str | None, bool]:
        """One model call of the role to move -> (whose turn next, the role's context ran out)."""
        s = self.base.settings
        view = await observe_into(seat.ep, env, sid, seat.role, _within(s.tool_timeout_s, deadline))
        if view.turn != seat.role:
            return view.turn, False
        request = seat.request
        if seat.ep.counters.turns and request.get("seed") is not None:
            request = {**request, "seed": derive_seed(int(request["seed"]), "turn", seat.ep.counters.turns)}
        budget = s.max_output_tokens - seat.ep.counters.output_tokens
        called = await seat.agent._call_model(request, seat.ep, task.env, budget, deadline)
        if called is None:
            return None, True
        output, _status = called
        seat.ep.counters.turns += 1
        calls = it.function_calls(output)
        if not calls:
            seat.ep.final_text = output_text(output)
            seat.ep.add_input([{"role": "user", "content": nudge(seat.role, seat.tool_names)}])
            return seat.role, False
        turn: str | None = seat.role
        t = time.monotonic()
        results: list[Item] = []
        for call in calls:  # in order: in a game the second call of a turn is already out of turn
            name, call_id = call.get("name"), call.get("call_id") or call.get("id") or ""
            if name not in seat.tool_names:
                text, is_error = (
                    f"error: role {seat.role!r} has no tool {name!r}; its tools: {', '.join(seat.tool_names)}",
                    True,
                )
            else:
                try:
                    out = await env.call_tool(
                        sid,
                        name,
                        call.get("arguments", "{}"),
                        role=seat.role,
                        timeout_s=_within(s.tool_timeout_s, deadline),
                    )
                except Exception as exc:  # noqa: BLE001
                    raise failure(exc, Phase.tool) from None
                text, is_error, turn = out.output, out.is_error, out.turn
            seat.ep.counters.tool_errors += int(is_error)
            results.append({"type": "function_call_output", "call_id": call_id, "output": text})
        seat.ep.counters.tool_calls += len(calls)
        seat.ep.timings.tools_s += time.monotonic() - t
        seat.ep.add_input(results)
        return turn, False

    async def _release(self, seats: dict[str, Seat], *, strict: bool = False) -> None:
        """Stop every harness seat and take its record into its role's episode."""
        players = {role: seat.player for role, seat in seats.items() if seat.player is not None}
        if not players:
            return
        # strict (the game ended): a crash raises before the records are taken; the way out
        # (RolesRunner.run's finally) takes them then, without raising again
        records = await finish_all(players, strict=strict)
        for role, record in records.items():
            seat = seats[role]
            if seat.harness_metrics is None:
                take(seat.ep, record)
                seat.harness_metrics, seat.segmented = record.metrics, record.segmented

    async def _verify(
        self, env: EnvClient, seats: dict[str, Seat], sid: str, session: list[str], *, zero_sum: bool
    ) -> None:
        s = self.base.settings
        last = list(seats)[-1]
        for role, seat in seats.items():
            t = time.monotonic()
            request = VerifyRequest(
                response=seat.ep.final_text, transcript=seat.ep.messages, role=role, close=role == last
            )
            try:
                seat.verdict = await env.verify(sid, request, timeout_s=s.verify_timeout_s)
            except Exception as exc:  # noqa: BLE001
                f = failure(exc, Phase.verify)
                f.error.message = f"role {role}: {f.error.message}"
                raise f from None
            seat.ep.timings.verify_s = time.monotonic() - t
            if seat.verdict.closed:
                session.clear()
        total = sum(seat.verdict.reward for seat in seats.values() if seat.verdict is not None)
        if zero_sum and abs(total) > ZERO_SUM_TOLERANCE:
            # The environment broke its own contract: no role may learn from these rewards.
            raise EpisodeFailure(
                Outcome.env_error,
                ErrorInfo(
                    kind=ErrorKind.protocol,
                    component="env",
                    message=f"a zero-sum environment gave rewards summing to {total:g}",
                ),
            )

    def _seat(self, role, policy: RolePolicy, agent: Agent, task: Task, ctx: RunContext, tools, names, sid) -> Seat:
        sampling = {**ctx.sampling, **policy.sampling.model_dump(exclude_none=True)}
        if sampling.get("seed") is not None:
            sampling["seed"] = derive_seed(int(sampling["seed"]), "role", role)  # each role its own draws
        role_ctx = replace(ctx, sampling=sampling, policy_version=policy.policy_version or ctx.policy_version)
        request = agent._base_request(task, role_ctx, tools, sid)
        request["metadata"]["rollgate_session"] = f"{sid}:{role}"  # each role's own prefix cache
        if policy.metadata:
            request["metadata"].update(policy.metadata)
        if policy.instructions is not None:
            request["instructions"] = policy.instructions
        ep = Episode()
        ep.add_input(it.input_items(task.row.responses_create_params["input"]))
        return Seat(role, policy, agent, ep, list(names), request, agent._sampling(task, role_ctx))

    def _empty_seat(self, role, policy: RolePolicy, agent: Agent, task: Task, ctx: RunContext, harness: bool) -> Seat:
        sampling = {} if harness else {**ctx.sampling, **policy.sampling.model_dump(exclude_none=True)}
        return Seat(role, policy, agent, Episode(), [], {}, sampling)

    def _trajectory(self, seat: Seat, task, ctx, group, episode_id, outcome, error, total_s) -> Trajectory:
        seat.ep.timings.total_s = total_s
        verdict = seat.verdict if outcome.has_reward else None
        return Trajectory(
            group_id=group,
            sample_index=ctx.sample_index,
            row_index=task.row_index,
            job_id=ctx.job_id,
            task=TaskRef(env=task.env, task_id=task.task_id, seed=task.row.seed, row=task.dump()),
            policy=PolicyRef(
                model=seat.agent.model_name,
                policy_version=seat.policy.policy_version or ctx.policy_version,
                sampling=seat.sampling,
            ),
            messages=seat.ep.messages,
            turns=seat.ep.turns,
            segmented=seat.segmented,
            role=seat.role,
            episode_id=episode_id,
            outcome=outcome,
            error=error,
            timings=seat.ep.timings,
            reward=verdict.reward if verdict else None,
            reward_components=verdict.reward_components if verdict else None,
            metrics={
                **(seat.harness_metrics if seat.harness_metrics is not None else seat.ep.counters.as_metrics()),
                **(verdict.metrics if verdict else {}),
            },
        )
