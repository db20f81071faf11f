"""The harness agent: one episode = one run of an external agent harness as a subprocess.

seed a session -> start the harness (under its reaper, in its own temporary directory) with a
model base URL whose path names the episode's capture session, the session's MCP URL and the task
prompt -> watch it: wall clock, model calls and generated tokens (counted from the capture store
as they happen), cancellation, output floods -> stop it and every process it started (reaper.py)
-> take the capture record ->
assemble one Trajectory -> verify -> clean up (capture session, environment session, directory).

Outcomes, typed like the shipped loop's:
- the harness exits with an accepted code after calling the model: `completed`, verified;
- the call or token budget runs out: `truncated`, verified (the calls within the budget);
- the wall clock runs out: `timeout`; the job is cancelled: `cancelled`;
- the program is not found, exits before calling the model, crashes, or floods its output:
  `env_error` naming the harness, with the first lines of its stderr. No reward, ever, for those.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollgate.agent_server.agent import RunContext
from rollgate.agent_server.captures import CaptureSource, usage_of
from rollgate.agent_server.episode import EpisodeFailure, Phase, failure
from rollgate.agent_server.harness.assemble import Assembled, assemble
from rollgate.agent_server.harness.config import HarnessConfig
from rollgate.agent_server.harness.process import HarnessProcess, ProcessResult
from rollgate.agent_server.harness.render import EpisodeView, render, task_text
from rollgate.agent_server.items import input_items
from rollgate.agent_server.plugins import AgentParts, Endpoints
from rollgate.agent_server.role_policy import refuse_harness_sampling
from rollgate.core.errors import BadRequest
from rollgate.core.logging import log_context
from rollgate.core.rows import Task, group_id
from rollgate.core.schemas import (
    ErrorInfo,
    ErrorKind,
    Outcome,
    PolicyRef,
    RolePolicy,
    TaskRef,
    Timings,
    Trajectory,
    VerifyRequest,
    new_id,
)

if TYPE_CHECKING:
    from rollgate.agent_server.harness.seat import HarnessSeat

log = logging.getLogger("rollgate.agent.harness")


@dataclass
class _Run:
    """What one episode gathered on its way (what becomes the Trajectory)."""

    session_id: str | None = None
    outcome: Outcome = Outcome.completed
    error: ErrorInfo | None = None
    verdict: Any = None
    assembled: Assembled = field(default_factory=Assembled)
    result: ProcessResult | None = None
    stopped_by: str | None = None  # calls | tokens | timeout | cancelled | flood
    messages: list[dict[str, Any]] = field(default_factory=list)
    final_text: str = ""
    timings: Timings = field(default_factory=Timings)


class HarnessAgent:
    def __init__(self, config: HarnessConfig, parts: AgentParts):
        if parts.endpoints is None or parts.captures is None:
            raise BadRequest(
                f"agent: the harness {config.name!r} runs a process that calls the model over HTTP; this "
                "stack has no HTTP endpoints (run it under `rollgate serve`, roles all or agent)",
                component="agent",
                field="agent",
            )
        self.config = config
        self.parts = parts
        self.endpoints: Endpoints = parts.endpoints
        self.captures: CaptureSource = parts.captures
        s = parts.settings
        self.timeout_s = config.timeout_s or s.episode_timeout_s
        self.max_calls = config.max_calls or s.max_turns
        self.max_output_tokens = config.max_output_tokens or s.max_output_tokens
        self.component = f"harness:{config.name}"

    @property
    def envs(self):
        return self.parts.envs

    # --- a seat of a multi-role episode (docs/roles.md; rollgate.agent_server.role_harness) ------
    def check_role(self, where: str, policy: RolePolicy, sampling: Mapping[str, Any]) -> None:
        """What a harness cannot honour for a role it plays: a 400 naming `<where>.<field>`."""
        overrides = {**sampling, **policy.sampling.model_dump(exclude_none=True)}
        refuse_harness_sampling(f"{where}.sampling", self.config.name, overrides, whose="the job's or the role's")
        if policy.model not in (None, self.parts.model_name):
            raise BadRequest(
                f"{where}.model: the harness {self.config.name!r} calls the served model "
                f"({self.parts.model_name!r}) through its capture URL; {policy.model!r} cannot be captured for it",
                component="agent",
                field=f"{where}.model",
            )

    def role_seat(self, role: str, task: Task, policy: RolePolicy, **kw: Any) -> HarnessSeat:
        from rollgate.agent_server.harness.seat import HarnessSeat

        return HarnessSeat(self, role, task, policy, **kw)

    async def run(self, task: Task, ctx: RunContext | None = None) -> Trajectory:
        ctx = ctx or RunContext()
        refuse_harness_sampling("sampling", self.config.name, ctx.sampling, whose="the job's")
        if task.env not in self.parts.envs:
            raise BadRequest(
                f"unknown environment {task.env!r}; known: {', '.join(sorted(self.parts.envs))}",
                component="agent",
                field="env",
            )
        trajectory_id = new_id("traj")
        episode = "harness-" + trajectory_id.removeprefix("traj_")
        started = time.monotonic()
        deadline = started + self.timeout_s
        if ctx.deadline is not None:
            deadline = min(deadline, ctx.deadline)
        run = _Run(messages=input_items(task.row.responses_create_params["input"]))
        m = self.parts.metrics
        m.rollouts_started.labels(task.env).inc()
        m.in_flight.labels(task.env).inc()
        with log_context(job_id=ctx.job_id, trajectory_id=trajectory_id, task_id=task.task_id, env=task.env):
            try:
                await self._episode(task, ctx, run, episode, deadline)
            except EpisodeFailure as f:
                run.outcome, run.error, run.verdict = f.outcome, f.error, None
                log.info("harness episode ended with %s: %s", f.outcome.value, f.error.message)
            finally:
                await self._close_session(task.env, run.session_id)
                m.in_flight.labels(task.env).dec()
        run.timings.total_s = time.monotonic() - started
        m.rollouts_finished.labels(task.env, run.outcome.value).inc()
        a = run.assembled
        return Trajectory(
            trajectory_id=trajectory_id,
            group_id=ctx.group_id or group_id(task.task_id, job_id=ctx.job_id, row_index=task.row_index),
            sample_index=ctx.sample_index,
            row_index=task.row_index,
            job_id=ctx.job_id,
            task=TaskRef(env=task.env, task_id=task.task_id, seed=task.row.seed, row=task.dump()),
            policy=PolicyRef(model=self.parts.model_name, policy_version=ctx.policy_version, sampling={}),
            messages=run.messages,
            turns=a.turns,
            segmented=a.segmented,
            outcome=run.outcome,
            error=run.error,
            timings=run.timings,
            reward=run.verdict.reward if run.verdict else None,
            reward_components=run.verdict.reward_components if run.verdict else None,
            metrics={**self.metrics_of(run), **(run.verdict.metrics if run.verdict else {})},
        )

    # --- the episode ------------------------------------------------------------------------
    async def _episode(self, task: Task, ctx: RunContext, run: _Run, episode: str, deadline: float) -> None:
        env = self.parts.envs[task.env]
        s = self.parts.settings
        t = time.monotonic()
        try:
            seeded = await env.seed(task.row, timeout_s=s.seed_timeout_s)
            run.session_id = seeded.session_id
            tools = task.row.responses_create_params.get("tools") or await env.tools()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
            raise failure(exc, Phase.seed) from None
        run.timings.seed_s = time.monotonic() - t
        workdir = tempfile.mkdtemp(prefix="rollgate-harness-")
        try:
            env_url = self.endpoints.env_url(task.env)
            view = EpisodeView(
                task=task_text(task, seeded.observation),
                issue=task_text(task, seeded.observation, instructions=False),
                model=self.parts.model_name,
                model_url=self.endpoints.model_url.rstrip("/"),
                api_key=self.endpoints.api_key or "rollgate",
                episode=episode,
                session_id=seeded.session_id,
                mcp_url=f"{env_url.rstrip('/')}/sessions/{seeded.session_id}/mcp" if env_url else "",
                tools=list(tools),
                workdir=workdir,
            )
            with log_context(session_id=seeded.session_id):
                await self._harness(view, ctx, run, deadline)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        self._judge(run)
        t = time.monotonic()
        try:
            run.verdict = await env.verify(
                run.session_id,
                VerifyRequest(response=run.final_text, transcript=run.messages),
                timeout_s=s.verify_timeout_s,
            )
        except Exception as exc:  # noqa: BLE001
            raise failure(exc, Phase.verify) from None
        run.timings.verify_s = time.monotonic() - t

    async def _harness(self, view: EpisodeView, ctx: RunContext, run: _Run, deadline: float) -> None:
        """Run the harness to its end or its budget; then take the capture record, always."""
        t = time.monotonic()
        proc: HarnessProcess | None = None
        try:
            proc = await self.start_process(view)
            run.stopped_by = await self.watch(proc, view.episode, ctx, deadline)
            run.result = await proc.finish()
        finally:
            if proc is not None:
                proc.abandon()  # cancelled or failed mid-way: nothing of it may outlive the episode
            run.timings.model_s = time.monotonic() - t  # the harness's time: its model calls and tools
            record, pop_error = await self.pop(view.episode)
        if pop_error is not None:
            raise failure(pop_error, Phase.model) from None
        self.take(run, record)

    async def start_process(self, view: EpisodeView) -> HarnessProcess:
        """The harness started under its reaper; a program that cannot run is an env_error."""
        c = self.config
        argv, env = render(c, view)
        proc = HarnessProcess(
            argv, env=env, cwd=view.workdir, keep_bytes=c.keep_output_bytes, flood_bytes=c.flood_bytes
        )
        try:
            await proc.start()
        except OSError as exc:
            what = "not found" if isinstance(exc, FileNotFoundError) else f"not runnable ({exc.strerror or exc})"
            raise self._fail(ErrorKind.not_found, f"command {argv[0]!r} {what}") from None
        log.info("harness %s started (reaper pid %d)", c.name, proc.pid)
        return proc

    async def pop(self, episode: str) -> tuple[dict[str, Any] | None, Exception | None]:
        """Take the capture record (shielded: the capture session never outlives the episode)."""
        try:
            return await asyncio.shield(self.captures.pop(episode)), None
        except Exception as exc:  # noqa: BLE001
            return None, exc

    def take(self, run: _Run, record: dict[str, Any] | None) -> None:
        """The capture record as the run's turns, transcript and final answer."""
        run.assembled = assemble(record, max_calls=self.max_calls)
        run.messages.extend(run.assembled.output)
        run.final_text = self._answer(run)

    async def watch(
        self,
        proc: HarnessProcess,
        episode: str,
        ctx: RunContext,
        deadline: float,
        until: Callable[[], Awaitable[bool]] | None = None,
    ) -> str | None:
        """Until the harness exits (None), `until` says so ("until"), or something stops it (the reason)."""
        events = [ctx.cancel] if ctx.cancel is not None else []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            await proc.wait(min(self.config.poll_interval_s, left), *events)
            if proc.flooded.is_set():
                return "flood"
            if ctx.cancel is not None and ctx.cancel.is_set():
                return "cancelled"
            try:
                usage = usage_of(await self.captures.get(episode))
            except Exception as exc:  # noqa: BLE001 - the next look may work; the harness goes on
                log.warning("cannot read capture session %s: %s", episode, exc)
                usage = None
            if usage is not None:
                if usage.calls > self.max_calls:
                    return "calls"
                if usage.output_tokens > self.max_output_tokens:
                    return "tokens"
            if until is not None and await until():
                return "until"
            if proc.exited:
                return None

    def _answer(self, run: _Run) -> str:
        last = run.assembled.final_text
        if self.config.answer != "stdout" or run.result is None:
            return last
        text = run.result.stdout.last_text()
        if self.config.answer_pattern:
            matches = re.findall(self.config.answer_pattern, text, flags=re.MULTILINE)
            return matches[-1].strip() if matches else last
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else last

    def _judge(self, run: _Run) -> None:
        """The outcome of a harness run that ended; raises EpisodeFailure for the failed ones."""
        self.check_stop(run.stopped_by, run.result)
        if run.stopped_by in ("calls", "tokens"):
            run.outcome = Outcome.truncated
            return
        self.check_exit(run)
        if run.assembled.calls == 0:
            raise self._fail(
                ErrorKind.protocol,
                "exited without calling the model (does it use the base URL it is given?)",
                run.result,
            )
        run.outcome = Outcome.completed

    def check_stop(self, stop: str | None, result: ProcessResult | None = None) -> None:
        """A cancel, the wall clock or a flood that stopped the harness, as the episode's failure."""
        if stop == "cancelled":
            raise EpisodeFailure(
                Outcome.cancelled,
                ErrorInfo(kind=ErrorKind.cancelled, component="agent", message="the job was cancelled"),
            )
        if stop == "timeout":
            raise EpisodeFailure(
                Outcome.timeout,
                ErrorInfo(
                    kind=ErrorKind.timeout,
                    component=self.component,
                    message=f"harness {self.config.name!r} ran past its wall-clock budget "
                    f"({self.timeout_s:g}s or the job's deadline); it and every process it started were stopped",
                ),
            )
        if stop == "flood":
            raise self._fail(ErrorKind.protocol, f"flooded its output (over {self.config.flood_bytes} bytes)", result)

    def check_exit(self, run: _Run) -> None:
        """A harness that exited with a code it may not exit with crashed: an env_error."""
        r, a = run.result, run.assembled
        assert r is not None
        if r.exit_code not in self.config.ok_exit_codes:
            how = f"exit code {r.exit_code}" if r.exit_code is not None else f"signal {r.signal}"
            if a.calls == 0:
                raise self._fail(ErrorKind.upstream, f"exited at once ({how}, {r.duration_s:.2f}s, no model call)", r)
            raise self._fail(ErrorKind.upstream, f"crashed ({how}) after {a.calls} model calls", r)

    def _fail(self, kind: ErrorKind, what: str, result: ProcessResult | None = None) -> EpisodeFailure:
        message = f"harness {self.config.name!r}: {what}"
        if result is not None:
            stderr = result.stderr.first_lines()
            message += f"; stderr: {stderr}" if stderr else "; stderr was empty"
        return EpisodeFailure(Outcome.env_error, ErrorInfo(kind=kind, component=self.component, message=message))

    def metrics_of(self, run: _Run) -> dict[str, Any]:
        a, r = run.assembled, run.result
        out: dict[str, Any] = {
            "harness": self.config.name,
            "turns": len(a.turns),
            "model_calls": a.calls,
            "output_tokens": a.output_tokens,
            "segments": a.segments,
            "stopped_by": run.stopped_by,
        }
        if a.calls > len(a.turns):
            out["calls_over_budget"] = a.calls - len(a.turns)
        if a.dropped_calls:
            out["dropped_calls"] = a.dropped_calls
        if r is not None:
            out.update(exit_code=r.exit_code, stdout_bytes=r.stdout.total, stderr_bytes=r.stderr.total)
        return out

    async def _close_session(self, env_name: str, session_id: str | None) -> None:
        if session_id is None:
            return
        with contextlib.suppress(Exception):  # best effort; the session store's TTL is the backstop
            await asyncio.shield(self.parts.envs[env_name].close(session_id, timeout_s=5.0))

    async def aclose(self) -> None:
        return None
