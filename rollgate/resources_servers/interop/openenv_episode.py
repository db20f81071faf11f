"""One OpenEnv episode over one Rollgate session: the action, observation and state that
Rollgate's OpenEnv face (openenv_serve.py) speaks, with no OpenEnv import.

    reset  {seed?, episode_id?, task?}       seeds a session (the task row, else a generated one)
    step   {"tool": name, "arguments": {...}} calls one of the environment's tools
    step   {"answer": "..."}                   runs verify: done=true, reward = the verify reward
    state                                      {episode_id (the session id), step_count, ...}

A step reaches `EnvRuntime.call_tool`, which knows the environment's tools and nothing else, or
verify through the final answer; no tool name reaches seed, reset, verify, close or state.
The observation carries the tool's output text and is_error, never the session's state.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, NotFound, field_of, validation_summary
from rollgate.core.rows import parse_row
from rollgate.core.schemas import VerifyRequest
from rollgate.resources_servers.base import EnvRuntime

# (n, seed, config, split) -> task rows: the registry's task generator of an environment
TaskSource = Callable[[int, int, "dict[str, Any] | None", str], list[dict[str, Any]]]


class InvalidAction(BadRequest):
    """A frame or body that breaks the face's contract (OpenEnv answers these with 422)."""

    status = 422


class EpisodeError(BadRequest):
    """A well-formed step at the wrong time: before reset, or after the episode was verified."""

    status = 409


class OpenEnvObservation(BaseModel):
    """What reset and step return (`observation` of OpenEnv's wire format)."""

    model_config = ConfigDict(extra="forbid")

    output: str = Field("", description="the tool's output text; at reset the environment's first observation")
    is_error: bool = Field(False, description="the tool refused the call (an illegal move, a bad argument)")
    tool: str | None = Field(None, description="the tool this step called")
    prompt: str | list[Any] | None = Field(
        None, description="at reset: the task's input (`responses_create_params.input` of the row)"
    )
    tools: list[dict[str, Any]] | None = Field(None, description="at reset: the tool schemas (OpenAI function format)")
    done: bool = Field(False, description="true once the final answer was verified")
    reward: float | None = Field(None, description="the verify reward, on the final step only")
    metadata: dict[str, Any] = Field(default_factory=dict, description="env and task_id; reward_components, metrics")


class OpenEnvState(BaseModel):
    """What `state` returns: the episode's bookkeeping, never the environment's own state."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str | None = Field(None, description="the Rollgate session id; null before reset")
    step_count: int = Field(0, ge=0, description="tool calls and the final answer of this episode")
    env: str
    task_id: str | None = None
    client_episode_id: str | None = Field(None, description="the episode_id the client passed to reset")
    done: bool = False
    reward: float | None = None


class ResetData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int | None = Field(None, ge=0, description="seeds the session (and the generated task)")
    episode_id: str | None = Field(None, max_length=255, description="the client's label for the episode")
    task: dict[str, Any] | None = Field(None, description="a task row; default: one the environment generates")


class Action(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str | None = None
    arguments: dict[str, Any] | str | None = None
    answer: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


ACTION_HELP = 'an action is {"tool": <name>, "arguments": {...}} or {"answer": "<final answer>"}'


def _invalid(exc: ValidationError, prefix: str) -> InvalidAction:
    field = field_of(exc.errors()[0], prefix=prefix) or "data"
    message = validation_summary(exc, default="arguments")
    return InvalidAction(f"{prefix}.{message}" if prefix else message, component="openenv", field=field)


def parse_action(raw: Any) -> Action:
    if not isinstance(raw, dict):
        raise InvalidAction(f"action must be a JSON object: {ACTION_HELP}", component="openenv", field="action")
    try:
        action = Action.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(exc, "action") from None
    if (action.tool is None) == (action.answer is None):
        raise InvalidAction(f"action: {ACTION_HELP}", component="openenv", field="action")
    if action.answer is not None and action.arguments is not None:
        raise InvalidAction("action.arguments: a final answer takes no arguments", component="openenv", field="action")
    return action


def parse_reset(raw: Any) -> ResetData:
    if raw is None:
        return ResetData()
    if not isinstance(raw, dict):
        raise InvalidAction(
            "reset data must be a JSON object {seed?, episode_id?, task?}", component="openenv", field="data"
        )
    try:
        return ResetData.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(exc, "") from None


def wire(obs: OpenEnvObservation) -> dict[str, Any]:
    """OpenEnv's step result: the observation, with reward and done beside it (and metadata,
    which OpenEnv also keeps inside the observation)."""
    out: dict[str, Any] = {"observation": obs.model_dump(exclude={"reward", "done"}), "reward": obs.reward}
    out["done"] = obs.done
    if obs.metadata:
        out["metadata"] = obs.metadata
    return out


class Episode:
    """One client's episode: at most one live Rollgate session at a time (a reset closes the
    previous one), deleted by `close` or once the final answer is verified."""

    def __init__(self, runtime: EnvRuntime, tasks: Callable[[], TaskSource | None]):
        self.runtime = runtime
        self._tasks = tasks
        self.session_id: str | None = None
        self.state = OpenEnvState(env=runtime.name)
        self._transcript: list[dict[str, Any]] = []

    async def reset(self, raw: Any) -> dict[str, Any]:
        data = parse_reset(raw)
        task = parse_row(self._row(data), env=self.runtime.name, where="task", component="openenv").row
        await self.close()
        try:
            seeded = await self.runtime.seed(task)
        except BadRequest as exc:
            field = "task" + (f".{exc.field}" if exc.field not in (None, "row") else "")
            raise InvalidAction(exc.message, component=exc.component, field=field) from None
        self.session_id = seeded.session_id
        self.state = OpenEnvState(
            episode_id=seeded.session_id, env=self.runtime.name, task_id=task.task_id, client_episode_id=data.episode_id
        )
        prompt = task.responses_create_params["input"]
        self._transcript = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        obs = OpenEnvObservation(
            output=seeded.observation or "",
            prompt=prompt,
            tools=self.runtime.tools(),
            metadata={"env": self.runtime.name, "task_id": task.task_id},
        )
        return wire(obs)

    def _row(self, data: ResetData) -> dict[str, Any]:
        if data.task is not None:
            return {**data.task, "seed": data.seed} if data.seed is not None else data.task
        generate = self._tasks()
        if generate is None:
            raise InvalidAction(
                f"{self.runtime.name} generates no tasks: send reset with a task row as `task`",
                component="openenv",
                field="task",
            )
        seed = data.seed if data.seed is not None else random.getrandbits(31)
        return generate(1, seed, None, "train")[0]

    def live(self) -> str:
        if self.state.done:
            raise EpisodeError("the episode is over (verified): send reset to start another", component="openenv")
        if self.session_id is None:
            raise EpisodeError("no episode: send reset first", component="openenv")
        return self.session_id

    async def step(self, raw: Any) -> dict[str, Any]:
        action = parse_action(raw)
        sid = self.live()
        if action.answer is not None:
            return await self._finish(sid, action.answer)
        assert action.tool is not None
        out = await self.call_tool(sid, action.tool, action.arguments)
        return wire(OpenEnvObservation(output=out.output, is_error=out.is_error, tool=action.tool))

    async def call_tool(self, sid: str, name: str, arguments: dict[str, Any] | str | None):
        try:
            out = await self.runtime.call_tool(sid, name, arguments)
        except NotFound as exc:
            if exc.field == "tool":  # the runtime knows the tools and nothing else: the invariant
                raise InvalidAction(exc.message, component=exc.component, field="action.tool") from None
            self.session_id = None  # the session expired or was deleted: nothing left to step
            raise
        self.state.step_count += 1
        call_id = f"call_{self.state.step_count}"
        args = arguments if isinstance(arguments, str) else jsonutil.dumps_str(arguments or {})
        self._transcript.append({"type": "function_call", "call_id": call_id, "name": name, "arguments": args})
        self._transcript.append({"type": "function_call_output", "call_id": call_id, "output": out.output})
        return out

    async def _finish(self, sid: str, answer: str) -> dict[str, Any]:
        final = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}
        request = VerifyRequest(response=answer, transcript=[*self._transcript, final])
        result = await self.runtime.verify(sid, request)
        self.state.step_count += 1
        self.state.done, self.state.reward = True, result.reward
        await self.close()
        metadata: dict[str, Any] = {"metrics": result.metrics}
        if result.reward_components is not None:
            metadata["reward_components"] = result.reward_components
        return wire(OpenEnvObservation(done=True, reward=result.reward, metadata=metadata))

    async def close(self) -> None:
        """Delete the live session, if any (the episode's bookkeeping stays for `state`)."""
        sid, self.session_id = self.session_id, None
        if sid is not None:
            await self.runtime.close(sid)
