"""A harness playing one role of a multi-role episode (docs/roles.md): the seat API the roles loop
uses (rollgate.agent_server.role_harness.HarnessPlayer), built on HarnessAgent's own machinery
(render, the process under its reaper, the capture session, assemble, its failure types).

The seat has a capture session of its own, so its role's trajectory holds exactly its calls,
token by token, and its tools come over the session's MCP endpoint for its role in step mode:
`?role=R&wait=S`, S the episode's time left, so each move returns with the other roles' moves."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from rollgate.agent_server.agent import RunContext
from rollgate.agent_server.episode import EpisodeFailure, Phase, failure
from rollgate.agent_server.harness.process import HarnessProcess
from rollgate.agent_server.harness.render import EpisodeView, task_text
from rollgate.agent_server.role_harness import Peek, SeatRecord
from rollgate.core.rows import Task
from rollgate.core.schemas import RolePolicy, new_id
from rollgate.resources_servers.interop.mcp_server import MAX_WAIT_S

if TYPE_CHECKING:
    from rollgate.agent_server.harness.agent import HarnessAgent, _Run


class HarnessSeat:
    def __init__(
        self,
        agent: HarnessAgent,
        role: str,
        task: Task,
        policy: RolePolicy,
        *,
        session_id: str,
        tools: list[dict[str, Any]],
        ctx: RunContext,
        deadline: float,
    ):
        from rollgate.agent_server.harness.agent import _Run

        self.agent = agent
        self.role = role
        self.task = task
        self.policy = policy
        self.session_id = session_id
        self.tools = tools
        self.ctx = ctx
        self.deadline = deadline
        self.episode = "harness-" + new_id("traj").removeprefix("traj_")  # its own capture session
        self.run: _Run = _Run(session_id=session_id)
        self.proc: HarnessProcess | None = None
        self.workdir: str | None = None
        self._started_at = 0.0
        self._taking: asyncio.Future[SeatRecord] | None = None
        self._crash: EpisodeFailure | None = None

    @property
    def started(self) -> bool:
        return self.proc is not None

    def _view(self, observation: str, workdir: str) -> EpisodeView:
        a, sid = self.agent, self.session_id
        prompt = task_text(self.task, observation, instructions=self.policy.instructions is None)
        if self.policy.instructions:
            prompt = f"{self.policy.instructions}\n\n{prompt}"
        env_url = a.endpoints.env_url(self.task.env)
        wait = max(1, min(int(MAX_WAIT_S), int(self.deadline - time.monotonic())))  # the episode's time left
        mcp = f"{env_url.rstrip('/')}/sessions/{sid}/mcp?role={quote(self.role)}&wait={wait}" if env_url else ""
        return EpisodeView(
            task=prompt,
            issue=task_text(self.task, observation, instructions=False),
            model=a.parts.model_name,
            model_url=a.endpoints.model_url.rstrip("/"),
            api_key=a.endpoints.api_key or "rollgate",
            episode=self.episode,
            session_id=sid,
            mcp_url=mcp,
            tools=self.tools,
            workdir=workdir,
            role=self.role,
            metadata=dict(self.policy.metadata or {}),
        )

    async def start(self, observation: str) -> None:
        self._started_at = time.monotonic()
        self.deadline = min(self.deadline, self._started_at + self.agent.timeout_s)
        self.workdir = tempfile.mkdtemp(prefix="rollgate-harness-")
        try:
            self.proc = await self.agent.start_process(self._view(observation, self.workdir))
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise

    async def play(self, peek: Peek) -> tuple[str | None, bool]:
        assert self.proc is not None
        turn: list[str | None] = [self.role]

        async def passed() -> bool:
            turn[0] = await peek()
            return turn[0] != self.role

        stop = await self.agent.watch(self.proc, self.episode, self.ctx, self.deadline, until=passed)
        if stop == "until":
            return turn[0], False
        self.run.stopped_by = stop
        self.agent.check_stop(stop)  # a cancel, the wall clock, a flood: raised
        if stop is None:  # it exited while it was its turn: a crash fails the episode, else unfinished
            turn[0] = await peek()
            await self.finish(strict=True)
            if turn[0] != self.role:  # its last move ended its turn just before it exited
                return turn[0], False
        return turn[0], True  # its call or token budget ran out, or it left its move unmade

    async def finish(self, *, grace_s: float = 0.0, strict: bool = False) -> SeatRecord:
        if self._taking is None:  # one take, whoever asks (the game's end, then the way out)
            self._taking = asyncio.ensure_future(self._take(grace_s))
        record = await asyncio.shield(self._taking)
        if strict and self._crash is not None:
            crash, self._crash = self._crash, None  # raised once
            raise crash
        return record

    async def _take(self, grace_s: float) -> SeatRecord:
        a, run, proc = self.agent, self.run, self.proc
        assert proc is not None
        record: dict[str, Any] | None = None
        try:
            if grace_s > 0 and not proc.exited:
                await proc.wait(grace_s)
            exited_itself = proc.exited
            run.result = await proc.finish()
        finally:
            proc.abandon()
            run.timings.model_s = time.monotonic() - self._started_at
            record, pop_error = await a.pop(self.episode)
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
        a.take(run, record)
        try:
            if pop_error is not None:
                raise failure(pop_error, Phase.model)
            if exited_itself:
                a.check_exit(run)
        except EpisodeFailure as f:
            self._crash = f
        return SeatRecord(
            turns=run.assembled.turns,
            output=run.assembled.output,
            final_text=run.final_text,
            segmented=run.assembled.segmented,
            metrics=a.metrics_of(run),  # the same metrics as a single-role harness run
            model_s=run.timings.model_s,
        )
