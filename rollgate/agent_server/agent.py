"""The agent loop: one episode of multi-turn tool use, from a parsed task to one Trajectory.

seed a session -> [call the model with the environment's tools -> run the turn's tool calls
concurrently -> feed the outputs back] until a final answer or a budget -> verify -> close.

Every way out is typed (rollgate.core.schemas.Outcome). An infrastructure failure (the model or
environment unreachable, a timeout, a broken reply) ends the episode with an error outcome and
NO reward, so trainers skip it instead of learning from a fake 0. The agent takes a parsed
`Task` (rollgate.core.rows): rows are validated at the edge, never here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollgate.agent_server import items as it
from rollgate.agent_server.episode import Episode, EpisodeFailure, Phase, failure
from rollgate.core.errors import BadRequest, ContextExhausted
from rollgate.core.items import Item, output_text
from rollgate.core.logging import log_context
from rollgate.core.metrics import Metrics
from rollgate.core.rows import Task, derive_seed, group_id
from rollgate.core.schemas import (
    SAMPLING_KEYS,
    ErrorInfo,
    ErrorKind,
    Outcome,
    PolicyRef,
    TaskRef,
    Trajectory,
    VerifyRequest,
    VerifyResult,
    new_id,
)
from rollgate.core.settings import AgentSettings
from rollgate.model_server.client import ModelClient
from rollgate.resources_servers.client import EnvClient

log = logging.getLogger("rollgate.agent")

TRAINING_METADATA = {"rollgate_training": "true"}
AGENT_NAME = "rollgate"  # this loop's name in the `rollgate.agents` plugin group (the default agent)


@dataclass
class RunContext:
    job_id: str | None = None
    group_id: str | None = None  # one group per row of a job; default: rollgate.core.rows.group_id
    sample_index: int = 0
    policy_version: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None  # absolute time.monotonic(); default: settings.episode_timeout_s
    cancel: asyncio.Event | None = None
    agent: str | None = None  # the job's agent (rollgate.agent_server.plugins.AgentSet picks it)
    # a multi-role job: role -> RolePolicy (rollgate.agent_server.roles runs it; None: one role)
    roles: dict[str, Any] | None = None


class Agent:
    def __init__(
        self,
        model: ModelClient,
        envs: Mapping[str, EnvClient],
        settings: AgentSettings,
        *,
        model_name: str,
        metrics: Metrics | None = None,
    ):
        self.model = model
        self.envs = envs
        self.settings = settings
        self.model_name = model_name
        self.metrics = metrics if metrics is not None else Metrics.off()
        self._tools: dict[str, list[Item]] = {}

    # --- public -------------------------------------------------------------------------
    async def run(self, task: Task, ctx: RunContext | None = None) -> Trajectory:
        """One episode of a parsed task (rollgate.core.rows.parse_row) -> its Trajectory."""
        ctx = ctx or RunContext()
        if ctx.agent not in (None, AGENT_NAME):
            # Never run a task meant for another agent with this loop (a worker without plugins).
            raise BadRequest(
                f"agent: this worker runs only the {AGENT_NAME!r} loop, not {ctx.agent!r}",
                component="agent",
                field="agent",
            )
        if task.env not in self.envs:
            raise BadRequest(
                f"unknown environment {task.env!r}; known: {', '.join(sorted(self.envs))}",
                component="agent",
                field="env",
            )
        env_name = task.env
        ep = Episode()
        trajectory_id = new_id("traj")
        started = time.monotonic()
        deadline = ctx.deadline or started + self.settings.episode_timeout_s
        m = self.metrics
        m.rollouts_started.labels(env_name).inc()
        m.in_flight.labels(env_name).inc()
        outcome, error, verdict = Outcome.completed, None, None
        with log_context(job_id=ctx.job_id, trajectory_id=trajectory_id, task_id=task.task_id, env=env_name):
            try:
                outcome, verdict = await self._guarded(task, ctx, ep, deadline)
            except EpisodeFailure as f:
                outcome, error = f.outcome, f.error
                log.info("episode ended with %s: %s", outcome.value, error.message)
            finally:
                await self._close(env_name, ep.session_id)
                m.in_flight.labels(env_name).dec()
        ep.timings.total_s = time.monotonic() - started
        traj = Trajectory(
            trajectory_id=trajectory_id,
            group_id=ctx.group_id or group_id(task.task_id, job_id=ctx.job_id, row_index=task.row_index),
            sample_index=ctx.sample_index,
            row_index=task.row_index,
            job_id=ctx.job_id,
            task=TaskRef(env=env_name, task_id=task.task_id, seed=task.row.seed, row=task.dump()),
            policy=PolicyRef(
                model=self.model_name, policy_version=ctx.policy_version, sampling=self._sampling(task, ctx)
            ),
            messages=ep.messages,
            turns=ep.turns,
            outcome=outcome,
            error=error,
            timings=ep.timings,
            reward=verdict.reward if verdict else None,
            reward_components=verdict.reward_components if verdict else None,
            metrics={**ep.counters.as_metrics(), **(verdict.metrics if verdict else {})},
        )
        m.rollouts_finished.labels(env_name, outcome.value).inc()
        if traj.reward is not None:
            m.reward.labels(env_name).observe(traj.reward)
        return traj

    # --- the episode --------------------------------------------------------------------
    async def _guarded(self, task: Task, ctx: RunContext, ep: Episode, deadline: float) -> tuple[Outcome, VerifyResult]:
        """Run the episode under its wall-clock budget and the job's cancel signal."""
        remaining = deadline - time.monotonic()
        episode = asyncio.ensure_future(self._episode(task, ctx, ep, deadline))
        waiters = {episode}
        cancel_wait = None
        if ctx.cancel is not None:
            cancel_wait = asyncio.ensure_future(ctx.cancel.wait())
            waiters.add(cancel_wait)
        try:
            done, _ = await asyncio.wait(waiters, timeout=max(0.0, remaining), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            episode.cancel()
            raise
        finally:
            if cancel_wait is not None:
                cancel_wait.cancel()
        if episode in done:
            return episode.result()
        episode.cancel()
        with contextlib.suppress(BaseException):
            await episode
        if cancel_wait is not None and cancel_wait in done:
            raise EpisodeFailure(
                Outcome.cancelled,
                ErrorInfo(kind=ErrorKind.cancelled, component="agent", message="the job was cancelled"),
            )
        budget = self.settings.episode_timeout_s if ctx.deadline is None else None
        what = f"{budget:g}s" if budget else "its deadline"
        raise EpisodeFailure(
            Outcome.timeout, ErrorInfo(kind=ErrorKind.timeout, component="agent", message=f"episode exceeded {what}")
        )

    async def _episode(self, task: Task, ctx: RunContext, ep: Episode, deadline: float) -> tuple[Outcome, VerifyResult]:
        s = self.settings
        env_name = task.env
        env = self.envs[env_name]
        t = time.monotonic()
        try:
            seeded = await env.seed(task.row, timeout_s=s.seed_timeout_s)
            tools = task.row.responses_create_params.get("tools") or await self._env_tools(env_name, env)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
            raise failure(exc, Phase.seed) from None
        ep.timings.seed_s = time.monotonic() - t
        self._hop(Phase.seed, env_name, ep.timings.seed_s)
        ep.session_id = seeded.session_id
        with log_context(session_id=seeded.session_id):
            return await self._turns(task, env_name, ctx, ep, env, tools, seeded.observation, deadline)

    async def _turns(
        self,
        task: Task,
        env_name: str,
        ctx: RunContext,
        ep: Episode,
        env: EnvClient,
        tools: list[Item],
        observation: str | None,
        deadline: float,
    ) -> tuple[Outcome, VerifyResult]:
        s = self.settings
        ep.add_input(it.input_items(task.row.responses_create_params["input"]))
        if observation:
            ep.add_input([{"role": "user", "content": observation}])
        tool_names = {t.get("name") for t in tools}
        base_request = self._base_request(task, ctx, tools, ep.session_id)
        outcome = Outcome.completed
        for turn_no in range(s.max_turns):
            budget = s.max_output_tokens - ep.counters.output_tokens
            if budget <= 0:
                outcome = Outcome.truncated
                break
            request = base_request
            if turn_no and base_request.get("seed") is not None:  # each turn its own draws, not the first's again
                request = {**base_request, "seed": derive_seed(int(base_request["seed"]), "turn", turn_no)}
            called = await self._call_model(request, ep, env_name, budget, deadline)
            if called is None:  # the conversation outgrew the model's context window
                outcome = Outcome.truncated
                break
            output, status = called
            ep.counters.turns = turn_no + 1
            calls = it.function_calls(output)
            if not calls:
                ep.final_text = output_text(output)
                if status == "incomplete":
                    outcome = Outcome.truncated
                break
            await self._run_tools(env, env_name, ep, calls, tool_names, deadline)
        else:
            outcome = Outcome.truncated
        verdict = await self._verify(env, env_name, ep)
        return outcome, verdict

    def _base_request(self, task: Task, ctx: RunContext, tools: list[Item], session_id: str) -> dict[str, Any]:
        rcp = task.row.responses_create_params
        params = {k: v for k, v in rcp.items() if k not in ("input", "tools", "stream")}
        params.update(self._sampling(task, ctx))
        params["model"] = self.model_name
        params["tools"] = tools
        params.setdefault("store", False)  # the trajectory is the record: no stored response to keep
        metadata = dict(params.get("metadata") or {})
        metadata.update(TRAINING_METADATA)
        metadata["rollgate_session"] = session_id  # replica affinity (prefix cache) in the model pool
        params["metadata"] = metadata
        return params

    def _sampling(self, task: Task, ctx: RunContext) -> dict[str, Any]:
        """The row's sampling settings, the job's overrides on top (only the keys of SAMPLING_KEYS)."""
        rcp = task.row.responses_create_params
        out = {k: rcp[k] for k in SAMPLING_KEYS if k in rcp}
        out.update({k: v for k, v in ctx.sampling.items() if v is not None and k in SAMPLING_KEYS})
        if ctx.sampling.get("seed") is not None:
            # A job's seed: each task draws from its own stream. One seed shared by every task would
            # give them all the same random numbers: the same guess wherever the policy is unsure,
            # so tasks would pass or fail together and an evaluation's interval would be too narrow.
            out["seed"] = derive_seed(int(ctx.sampling["seed"]), task.env, task.task_id)
        if "seed" in out and ctx.sample_index:
            out["seed"] = int(out["seed"]) + ctx.sample_index  # repeats of one task must differ
        return out

    async def _env_tools(self, env_name: str, env: EnvClient) -> list[Item]:
        if env_name not in self._tools:
            self._tools[env_name] = await env.tools()
        return self._tools[env_name]

    async def _call_model(
        self, base_request: dict[str, Any], ep: Episode, env_name: str, budget: int, deadline: float
    ) -> tuple[list[Item], str | None] | None:
        """One model call: its output items and status, or None when the context is exhausted."""
        s = self.settings
        per_call = int(base_request.get("max_output_tokens") or s.max_output_tokens_per_call)
        request = {**base_request, "input": ep.history, "max_output_tokens": max(1, min(per_call, budget))}
        t = time.monotonic()
        try:
            # One deadline per call, retries included, never past the episode's (docs/api.md)
            response = await self.model.create(request, timeout_s=_within(s.model_timeout_s, deadline))
            output = it.output_items(response)
            turn = it.turn_from_output(output)
        except ContextExhausted as exc:
            if not ep.counters.turns:  # the task's own prompt does not fit: nothing to verify
                raise failure(exc, Phase.model) from None
            # The conversation outgrew the model's context: a budget ran out, not a failure.
            ep.counters.context_exhausted = True
            return None
        except Exception as exc:  # noqa: BLE001
            raise failure(exc, Phase.model) from None
        dt = time.monotonic() - t
        ep.timings.model_s += dt
        self._hop(Phase.model, env_name, dt)
        usage = response.get("usage") or {}
        if turn is not None:
            turn.finish_reason = "length" if response.get("status") == "incomplete" else "stop"
            if ep.turns and not it.extends(ep.turns[-1], turn):
                ep.counters.token_drift += 1
                self.metrics.token_drift.labels(env_name).inc()
            ep.turns.append(turn)
            ep.counters.output_tokens += len(turn.generation_token_ids)
            in_tokens = len(turn.prompt_token_ids)
        else:
            ep.counters.output_tokens += int(usage.get("output_tokens") or 0)
            in_tokens = int(usage.get("input_tokens") or 0)
        self.metrics.tokens.labels("in", env_name).inc(in_tokens)
        self.metrics.tokens.labels("out", env_name).inc(
            len(turn.generation_token_ids) if turn else int(usage.get("output_tokens") or 0)
        )
        ep.add_model_output(output)
        return output, response.get("status")

    async def _run_tools(
        self, env: EnvClient, env_name: str, ep: Episode, calls: list[Item], tool_names: set[str], deadline: float
    ) -> None:
        t = time.monotonic()

        async def one(call: Item) -> Item:
            name = call.get("name")
            call_id = call.get("call_id") or call.get("id") or ""
            if name not in tool_names:
                # The model invented a tool: tell it, don't bother the environment.
                text, is_error = f"error: unknown tool {name!r}; available: {', '.join(sorted(tool_names))}", True
            else:
                started = time.monotonic()
                try:
                    out = await env.call_tool(
                        ep.session_id,
                        name,
                        call.get("arguments", "{}"),
                        timeout_s=_within(self.settings.tool_timeout_s, deadline),
                    )
                except Exception as exc:  # noqa: BLE001
                    raise failure(exc, Phase.tool) from None
                self._hop(Phase.tool, env_name, time.monotonic() - started)
                text, is_error = out.output, out.is_error
            ep.counters.tool_errors += int(is_error)
            return {"type": "function_call_output", "call_id": call_id, "output": text}

        results = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        ep.counters.tool_calls += len(calls)
        ep.timings.tools_s += time.monotonic() - t
        ep.add_input(list(results))  # type: ignore[arg-type]

    async def _verify(self, env: EnvClient, env_name: str, ep: Episode) -> VerifyResult:
        t = time.monotonic()
        try:
            verdict = await env.verify(
                ep.session_id,
                VerifyRequest(response=ep.final_text, transcript=ep.messages, close=True),
                timeout_s=self.settings.verify_timeout_s,
            )
        except Exception as exc:  # noqa: BLE001
            raise failure(exc, Phase.verify) from None
        if verdict.closed:  # closed with the verdict: nothing left for _close to do
            ep.session_id = None
        ep.timings.verify_s = time.monotonic() - t
        self._hop(Phase.verify, env_name, ep.timings.verify_s)
        return verdict

    async def _close(self, env_name: str, session_id: str | None) -> None:
        if session_id is None:
            return
        # Best effort and shielded: a cancelled episode still frees its session (TTL is the backstop).
        with contextlib.suppress(Exception):
            await asyncio.shield(self.envs[env_name].close(session_id, timeout_s=5.0))

    def _hop(self, hop: Phase, env_name: str, seconds: float) -> None:
        self.metrics.hop_latency.labels(hop, env_name).observe(seconds)


def _within(timeout_s: float, deadline: float) -> float:
    """A call's budget: its own timeout, cut to what is left of the episode."""
    return max(0.001, min(timeout_s, deadline - time.monotonic()))
