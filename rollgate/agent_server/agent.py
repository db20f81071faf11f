"""The agent loop: one episode of multi-turn tool use, from a task row to one Trajectory.

seed a session -> [call the model with the environment's tools -> run the turn's tool calls
concurrently -> feed the outputs back] until a final answer or a budget -> verify -> close.

Every way out is typed (rollgate.core.schemas.Outcome). An infrastructure failure (the model or
environment unreachable, a timeout, a broken reply) ends the episode with an error outcome and
NO reward, so trainers skip it instead of learning from a fake 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rollgate.agent_server import items as it
from rollgate.core.errors import BadRequest, RollgateError
from rollgate.core.logging import log_context
from rollgate.core.metrics import Metrics
from rollgate.core.schemas import (
    ErrorInfo,
    ErrorKind,
    Outcome,
    PolicyRef,
    TaskRef,
    TaskRow,
    Timings,
    Trajectory,
    Turn,
    VerifyRequest,
    new_id,
)
from rollgate.core.settings import AgentSettings
from rollgate.model_server.client import ModelClient
from rollgate.resources_servers.client import EnvClient

log = logging.getLogger("rollgate.agent")

SAMPLING_KEYS = ("temperature", "top_p", "seed", "max_output_tokens")
TRAINING_METADATA = {"rollgate_training": "true"}


@dataclass
class RunContext:
    job_id: str | None = None
    group_id: str | None = None  # one group per task; repeats of a task share it
    sample_index: int = 0
    policy_version: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None  # absolute time.monotonic(); default: settings.episode_timeout_s
    cancel: asyncio.Event | None = None


class EpisodeFailure(Exception):
    """Ends an episode early with an error outcome (raised inside the loop only)."""

    def __init__(self, outcome: Outcome, error: ErrorInfo):
        super().__init__(error.message)
        self.outcome = outcome
        self.error = error


def _failure(exc: BaseException, phase: str) -> EpisodeFailure:
    """Map an exception raised while talking to a part to the episode's outcome."""
    component = "model" if phase == "model" else ("verify" if phase == "verify" else "env")
    outcome = Outcome.model_error if phase == "model" else Outcome.env_error
    if isinstance(exc, RollgateError):
        info = exc.info()
        info.component = component if info.component in ("rollgate", "store") else info.component
        return EpisodeFailure(outcome, info)
    if isinstance(exc, TimeoutError):
        return EpisodeFailure(
            outcome,
            ErrorInfo(kind=ErrorKind.timeout, component=component, message=f"{phase} call exceeded its timeout"),
        )
    log.exception("unexpected error during %s", phase)
    return EpisodeFailure(
        outcome, ErrorInfo(kind=ErrorKind.internal, component="agent", message=f"{phase}: {type(exc).__name__}: {exc}")
    )


class Episode:
    """The mutable record of one running episode (what becomes the Trajectory)."""

    def __init__(self):
        self.messages: list[dict[str, Any]] = []  # readable transcript
        self.history: list[dict[str, Any]] = []  # what the model is sent (token fields on the last call only)
        self._token_items: list[int] = []
        self.turns: list[Turn] = []
        self.timings = Timings()
        self.output_tokens = 0
        self.metrics: dict[str, Any] = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "token_drift": 0}
        self.final_text = ""
        self.session_id: str | None = None

    def add_input(self, items: list[dict[str, Any]]) -> None:
        self.history.extend(items)
        self.messages.extend(it.readable(i) for i in items)

    def add_model_output(self, output: list[dict[str, Any]]) -> None:
        # Only the newest call's items need their token ids (the server extends from the last
        # one), so older copies are dropped: the request grows with the text, not with tokens.
        for idx in self._token_items:
            self.history[idx] = it.readable(self.history[idx])
        start = len(self.history)
        self.history.extend(output)
        self._token_items = [start + i for i, item in enumerate(output) if "prompt_token_ids" in item]
        self.messages.extend(it.readable(i) for i in output)


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
        self.metrics = metrics
        self._tools: dict[str, list[dict[str, Any]]] = {}

    # --- public -------------------------------------------------------------------------
    def parse(self, row: dict[str, Any] | TaskRow, env: str | None = None) -> tuple[TaskRow, str]:
        """Validate a row and resolve its environment; BadRequest names the field."""
        if isinstance(row, TaskRow):
            task = row
        else:
            if not isinstance(row, dict):
                raise BadRequest("a task row must be a JSON object", component="agent", field="row")
            try:
                task = TaskRow.model_validate(row)
            except ValidationError as exc:
                e = exc.errors()[0]
                where = ".".join(str(x) for x in e.get("loc", ())) or "row"
                raise BadRequest(
                    f"malformed task row: {where}: {e.get('msg')}", component="agent", field=where
                ) from None
        env_name = env or task.env
        if not env_name:
            raise BadRequest(
                "the row names no environment (field `env`) and none was given", component="agent", field="env"
            )
        if env_name not in self.envs:
            raise BadRequest(
                f"unknown environment {env_name!r}; known: {', '.join(sorted(self.envs))}",
                component="agent",
                field="env",
            )
        return task, env_name

    async def run(
        self, row: dict[str, Any] | TaskRow, ctx: RunContext | None = None, *, env: str | None = None
    ) -> Trajectory:
        ctx = ctx or RunContext()
        task, env_name = self.parse(row, env)
        row_dict = task.row()
        task_id = task.task_id or it.stable_task_id(row_dict)
        ep = Episode()
        trajectory_id = new_id("traj")
        started = time.monotonic()
        deadline = ctx.deadline or started + self.settings.episode_timeout_s
        m = self.metrics
        if m:
            m.rollouts_started.labels(env_name).inc()
            m.in_flight.labels(env_name).inc()
        outcome, error, verdict = Outcome.completed, None, None
        with log_context(job_id=ctx.job_id, trajectory_id=trajectory_id, task_id=task_id, env=env_name):
            try:
                outcome, verdict = await self._guarded(task, env_name, ctx, ep, deadline)
            except EpisodeFailure as f:
                outcome, error = f.outcome, f.error
                log.info("episode ended with %s: %s", outcome.value, error.message)
            finally:
                await self._close(env_name, ep.session_id)
                if m:
                    m.in_flight.labels(env_name).dec()
        ep.timings.total_s = time.monotonic() - started
        ep.metrics["output_tokens"] = ep.output_tokens
        sampling = {k: v for k, v in self._sampling(task, ctx).items() if k in SAMPLING_KEYS}
        traj = Trajectory(
            trajectory_id=trajectory_id,
            group_id=ctx.group_id or f"grp_{task_id}",
            sample_index=ctx.sample_index,
            job_id=ctx.job_id,
            task=TaskRef(env=env_name, task_id=task_id, seed=task.seed, row=row_dict),
            policy=PolicyRef(model=self.model_name, policy_version=ctx.policy_version, sampling=sampling),
            messages=ep.messages,
            turns=ep.turns,
            outcome=outcome,
            error=error,
            timings=ep.timings,
            reward=verdict.reward if verdict else None,
            reward_components=verdict.reward_components if verdict else None,
            metrics={**ep.metrics, **(verdict.metrics if verdict else {})},
        )
        if m:
            m.rollouts_finished.labels(env_name, outcome.value).inc()
            if traj.reward is not None:
                m.reward.labels(env_name).observe(traj.reward)
        return traj

    # --- the episode --------------------------------------------------------------------
    async def _guarded(self, task, env_name, ctx, ep, deadline):
        """Run the episode under its wall-clock budget and the job's cancel signal."""
        remaining = deadline - time.monotonic()
        episode = asyncio.ensure_future(self._episode(task, env_name, ctx, ep))
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

    async def _episode(self, task: TaskRow, env_name: str, ctx: RunContext, ep: Episode):
        s = self.settings
        env = self.envs[env_name]
        t = time.monotonic()
        try:
            seeded = await env.seed(task.row(), timeout_s=s.seed_timeout_s)
            tools = task.responses_create_params.get("tools") or await self._env_tools(env_name, env)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
            raise _failure(exc, "seed") from None
        ep.timings.seed_s = time.monotonic() - t
        self._hop("seed", env_name, ep.timings.seed_s)
        ep.session_id = seeded.session_id
        with log_context(session_id=seeded.session_id):
            return await self._turns(task, env_name, ctx, ep, env, tools, seeded.observation)

    async def _turns(
        self, task: TaskRow, env_name: str, ctx: RunContext, ep: Episode, env: EnvClient, tools, observation: str | None
    ):
        s = self.settings
        ep.add_input(it.input_items(task.responses_create_params["input"]))
        if observation:
            ep.add_input([{"role": "user", "content": observation}])
        tool_names = {t.get("name") for t in tools}
        base_request = self._base_request(task, ctx, tools, ep.session_id)
        outcome = Outcome.completed
        for turn_no in range(s.max_turns):
            budget = s.max_output_tokens - ep.output_tokens
            if budget <= 0:
                outcome = Outcome.truncated
                break
            called = await self._call_model(base_request, ep, env_name, budget)
            if called is None:  # the conversation outgrew the model's context window
                outcome = Outcome.truncated
                break
            output, status = called
            ep.metrics["turns"] = turn_no + 1
            calls = it.function_calls(output)
            if not calls:
                ep.final_text = it.final_text(output)
                if status == "incomplete":
                    outcome = Outcome.truncated
                break
            await self._run_tools(env, env_name, ep, calls, tool_names)
        else:
            outcome = Outcome.truncated
        verdict = await self._verify(env, env_name, ep)
        return outcome, verdict

    def _base_request(self, task: TaskRow, ctx: RunContext, tools, session_id: str) -> dict[str, Any]:
        params = {k: v for k, v in task.responses_create_params.items() if k not in ("input", "tools", "stream")}
        params.update(self._sampling(task, ctx))
        params["model"] = self.model_name
        params["tools"] = tools
        metadata = dict(params.get("metadata") or {})
        metadata.update(TRAINING_METADATA)
        metadata["rollgate_session"] = session_id  # replica affinity (prefix cache) in the model pool
        params["metadata"] = metadata
        return params

    def _sampling(self, task: TaskRow, ctx: RunContext) -> dict[str, Any]:
        out = {k: task.responses_create_params[k] for k in SAMPLING_KEYS if k in task.responses_create_params}
        out.update({k: v for k, v in ctx.sampling.items() if v is not None})
        if "seed" in out and ctx.sample_index:
            out["seed"] = int(out["seed"]) + ctx.sample_index  # repeats of one task must differ
        return out

    async def _env_tools(self, env_name: str, env: EnvClient) -> list[dict[str, Any]]:
        if env_name not in self._tools:
            self._tools[env_name] = await env.tools()
        return self._tools[env_name]

    async def _call_model(self, base_request, ep: Episode, env_name: str, budget: int):
        s = self.settings
        per_call = int(base_request.get("max_output_tokens") or s.max_output_tokens_per_call)
        request = {**base_request, "input": ep.history, "max_output_tokens": max(1, min(per_call, budget))}
        t = time.monotonic()
        try:
            response = await self.model.create(request, timeout_s=s.model_timeout_s)
            output = it.output_items(response)
            turn = it.turn_from_output(output)
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, BadRequest) and "context" in exc.message.lower() and ep.metrics["turns"]:
                # The conversation outgrew the model's context: a budget ran out, not a failure.
                ep.metrics["context_exhausted"] = True
                return None
            raise _failure(exc, "model") from None
        dt = time.monotonic() - t
        ep.timings.model_s += dt
        self._hop("model", env_name, dt)
        usage = response.get("usage") or {}
        if turn is not None:
            turn.finish_reason = "length" if response.get("status") == "incomplete" else "stop"
            if ep.turns and not it.extends(ep.turns[-1], turn):
                ep.metrics["token_drift"] += 1
                if self.metrics:
                    self.metrics.token_drift.labels(env_name).inc()
            ep.turns.append(turn)
            ep.output_tokens += len(turn.generation_token_ids)
            in_tokens = len(turn.prompt_token_ids)
        else:
            ep.output_tokens += int(usage.get("output_tokens") or 0)
            in_tokens = int(usage.get("input_tokens") or 0)
        if self.metrics:
            self.metrics.tokens.labels("in", env_name).inc(in_tokens)
            self.metrics.tokens.labels("out", env_name).inc(
                len(turn.generation_token_ids) if turn else int(usage.get("output_tokens") or 0)
            )
        ep.add_model_output(output)
        return output, response.get("status")

    async def _run_tools(self, env: EnvClient, env_name: str, ep: Episode, calls, tool_names) -> None:
        t = time.monotonic()

        async def one(call: dict[str, Any]) -> dict[str, Any]:
            name = call.get("name")
            call_id = call.get("call_id") or call.get("id") or ""
            if name not in tool_names:
                # The model invented a tool: tell it, don't bother the environment.
                text, is_error = f"error: unknown tool {name!r}; available: {', '.join(sorted(tool_names))}", True
            else:
                started = time.monotonic()
                try:
                    out = await env.call_tool(
                        ep.session_id, name, call.get("arguments", "{}"), timeout_s=self.settings.tool_timeout_s
                    )
                except Exception as exc:  # noqa: BLE001
                    raise _failure(exc, "tool") from None
                self._hop("tool", env_name, time.monotonic() - started)
                text, is_error = out.output, out.is_error
            ep.metrics["tool_errors"] += int(is_error)
            return {"type": "function_call_output", "call_id": call_id, "output": text}

        results = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        ep.metrics["tool_calls"] += len(calls)
        ep.timings.tools_s += time.monotonic() - t
        ep.add_input(list(results))  # type: ignore[arg-type]

    async def _verify(self, env: EnvClient, env_name: str, ep: Episode):
        t = time.monotonic()
        try:
            verdict = await env.verify(
                ep.session_id,
                VerifyRequest(response=ep.final_text, transcript=ep.messages),
                timeout_s=self.settings.verify_timeout_s,
            )
        except Exception as exc:  # noqa: BLE001
            raise _failure(exc, "verify") from None
        ep.timings.verify_s = time.monotonic() - t
        self._hop("verify", env_name, ep.timings.verify_s)
        return verdict

    async def _close(self, env_name: str, session_id: str | None) -> None:
        if session_id is None:
            return
        # Best effort and shielded: a cancelled episode still frees its session (TTL is the backstop).
        with contextlib.suppress(Exception):
            await asyncio.shield(self.envs[env_name].close(session_id, timeout_s=5.0))

    def _hop(self, hop: str, env_name: str, seconds: float) -> None:
        if self.metrics:
            self.metrics.hop_latency.labels(hop, env_name).observe(seconds)
