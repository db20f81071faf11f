"""The environment base: declare tools once, get the schema, the route and the validation.

An environment is a subclass of `Environment` with
- `name` and a pydantic `State` (the per-session state kept in the session store),
- `seed(task, rng)` -> a fresh State (plus an optional observation for the model),
- tool methods decorated with `@tool`: `def move(self, state: State, direction: Dir) -> str`;
  the parameters after `state` become the OpenAI function schema and the argument validator,
  the docstring's first paragraph the description,
- `verify(state, request)` -> VerifyResult. The session holds the state only, never the task
  row: whatever verify needs from the row, `seed` copies into the state.

Tools mutate `state` in place; `EnvRuntime` loads it, runs the tool and stores it back
atomically. A tool raises `ToolError` for an illegal action: the model reads it as an error output.

An environment with several roles (a game's players, a solver and a grader) also sets `roles`,
marks each tool with the roles that may call it (`@tool(role="grader")`; unmarked: every role),
and defines `turn(state)` (whose move, None when over) and `observe(state, role)`; `verify`
reads `request.role`. rollgate.resources_servers.roles holds the rules; docs/roles.md the guide.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ValidationError

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, NotFound, field_error, validation_summary
from rollgate.core.items import last_assistant_text
from rollgate.core.metrics import Metrics
from rollgate.core.rows import parse_row
from rollgate.core.schemas import RoleView, SeedResponse, TaskRow, ToolOutput, VerifyRequest, VerifyResult
from rollgate.core.session_store import SessionStore
from rollgate.resources_servers import roles
from rollgate.resources_servers.tools import ToolError, ToolSpec, build_spec, tool

__all__ = ["EnvRuntime", "Environment", "ToolError", "ToolSpec", "tool"]


class Environment:
    """Base class of every environment. Subclasses set `name`, `State`, and define seed/verify/tools."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # What `rollgate eval reverify` may do with a stored trajectory, no model involved:
    # "answer": seed from the row, then verify the stored final answer (verify reads only the
    #           seeded state and the answer); "replay": seed, replay the stored tool calls (the
    #           tools are deterministic given the seed), then verify; "never": verification
    #           depends on live state that cannot be rebuilt, so re-verification is refused.
    reverify: ClassVar[Literal["answer", "replay", "never"]] = "never"
    State: ClassVar[type[BaseModel]]
    # The environment fields of a task row that `seed` reads, as a model: the runtime validates
    # them with it before `seed` (a bad one is a 400 naming the field) and the OpenAPI document
    # of the seed routes publishes its schema. None: `seed` checks the row itself.
    Row: ClassVar[type[BaseModel] | None] = None
    # Several roles in one episode (rollgate.resources_servers.roles): their names, in no order
    # of play (`turn` decides); `zero_sum`: the roles' rewards add up to 0 in every episode.
    roles: ClassVar[tuple[str, ...]] = ()
    zero_sum: ClassVar[bool] = False
    _tool_specs: ClassVar[dict[str, ToolSpec]]
    _async_hooks: ClassVar[frozenset[str]] = frozenset()  # which lifecycle hooks are coroutines
    _holds_sessions: ClassVar[bool] = False  # does it override close_session?

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        specs: dict[str, ToolSpec] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if callable(value) and hasattr(value, "__rollgate_tool__"):
                    spec = build_spec(cls, attr, value)
                    specs[spec.name] = spec
        for spec in specs.values():
            unknown = [r for r in spec.roles if r not in cls.roles]
            if unknown:
                raise TypeError(
                    f"{cls.__name__}.{spec.method_name}: role {unknown[0]!r} is not one of roles {cls.roles}"
                )
        cls._tool_specs = specs
        cls._async_hooks = frozenset(
            hook for hook in ("seed", "verify", "close_session") if inspect.iscoroutinefunction(getattr(cls, hook))
        )
        cls._holds_sessions = cls.close_session is not Environment.close_session

    # --- to override -------------------------------------------------------------------
    # Each lifecycle hook may be a plain method or a coroutine (an environment that reaches an
    # external server); the runtime reads which from the method itself, once per class.
    def seed(self, task: TaskRow, rng: random.Random) -> BaseModel | tuple[BaseModel, str | None]:
        raise NotImplementedError

    def verify(self, state: Any, request: VerifyRequest) -> VerifyResult:
        raise NotImplementedError

    def turn(self, state: Any) -> str | None:
        """A multi-role environment: the role to move now; None once the episode is over."""
        raise NotImplementedError

    def observe(self, state: Any, role: str) -> str:
        """A multi-role environment: what `role` sees now that it has not seen yet (its own view:
        never another role's private state). May mark it seen in `state`."""
        raise NotImplementedError

    def close_session(self, state: Any) -> None:
        """Release what one session holds outside the session store (e.g. an MCP connection).
        The default holds nothing."""

    async def aclose(self) -> None:
        """Release what the environment holds (connections, worker processes) at shutdown."""

    # --- derived -----------------------------------------------------------------------
    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        return cls._tool_specs

    @classmethod
    def tool_schemas(cls) -> list[dict[str, Any]]:
        return [s.openai_schema() for s in cls._tool_specs.values()]


def tool_output_text(value: Any) -> str:
    if value is None:
        return "ok"
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return jsonutil.dumps_str(value)


def final_response_text(request: VerifyRequest) -> str:
    """The agent's final answer: `response`, else the last assistant message of the transcript."""
    if request.response is not None:
        return request.response
    return last_assistant_text(request.transcript or [])


# pydantic names union members in error locations ("str", "int"): not field names
_TYPE_TAGS = {"str", "int", "float", "bool", "function-before[_integral(), int]"}


def _tool_arguments(spec: ToolSpec, arguments: Any) -> BaseModel | ToolOutput:
    """The validated arguments of a call, or the error output the model reads."""
    if isinstance(arguments, str):
        try:
            arguments = jsonutil.loads(arguments) if arguments.strip() else {}
        except jsonutil.JSONDecodeError as exc:
            return ToolOutput(output=f"error: arguments are not valid JSON ({exc})", is_error=True)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolOutput(output="error: arguments must be a JSON object", is_error=True)
    try:
        return spec.params.model_validate(arguments)
    except ValidationError as exc:
        return ToolOutput(
            output=f"error: invalid arguments for {spec.name}: {validation_summary(exc, default='arguments')}",
            is_error=True,
        )


class EnvRuntime:
    """Runs one environment over a session store: the logic behind every route (and the
    in-process client of the embedded shape). Stored per session: the seed and the state."""

    component = "env"

    def __init__(
        self,
        env: Environment,
        store: SessionStore,
        *,
        metrics: Metrics | None = None,
        tasks: Callable[..., list[dict[str, Any]]] | None = None,
    ):
        """`tasks`: the environment's task generator (its registry entry's, `make_runtime`), which
        OpenEnv's reset without a task draws from; None: its module's `example_tasks`, if any."""
        self.env = env
        self.store = store
        self.tasks = tasks
        self._tool_counter = (metrics if metrics is not None else Metrics.off()).tool_calls
        self.specs = env.tool_specs()
        self._schemas = env.tool_schemas()

    @property
    def name(self) -> str:
        return self.env.name

    def tools(self) -> list[dict[str, Any]]:
        return self._schemas

    def parse(self, raw: Any) -> TaskRow:
        """A seed route's body as a task row: this server is an edge (rollgate.core.rows)."""
        return parse_row(raw, env=self.name, component=self.component).row

    async def seed(self, task: TaskRow | dict[str, Any]) -> SeedResponse:
        """Start a session. A raw row is parsed here (a direct caller is an edge); the agent's
        in-process client passes the TaskRow it parsed, which is not validated again."""
        if not isinstance(task, TaskRow):
            task = self.parse(task)
        if task.env is not None and task.env != self.name:
            raise BadRequest(
                f"task is for environment {task.env!r}, this server runs {self.name!r}",
                component=self.component,
                field="env",
            )
        if self.env.Row is not None:
            self._check_row(self.env.Row, task)
        seed = task.seed if task.seed is not None else random.getrandbits(32)
        try:
            out = self.env.seed(task, random.Random(seed))
            if "seed" in self.env._async_hooks:  # seeding that reaches an external server (interop/)
                out = await out
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise BadRequest(
                f"cannot seed {self.name} from this row: {exc}", component=self.component, field="row"
            ) from None
        state, observation = out if isinstance(out, tuple) else (out, None)
        sid = await self.store.create({"seed": seed, "state": state.model_dump(mode="json")})
        turn = self.env.turn(state) if self.env.roles else None
        return SeedResponse(session_id=sid, observation=observation, turn=turn)

    def _check_row(self, row: type[BaseModel], task: TaskRow) -> None:
        try:
            row.model_validate(task.env_fields, strict=True)
        except ValidationError as exc:
            raise field_error(
                exc, component=self.component, default="row", skip=_TYPE_TAGS, note=f" (a {self.name} row)"
            ) from None

    async def call_tool(
        self, session_id: str, name: str, arguments: dict[str, Any] | str | None, role: str | None = None
    ) -> ToolOutput:
        out = await self._call_tool(session_id, name, arguments, role)
        self._tool_counter.labels(self.name, name, "error" if out.is_error else "ok").inc()
        return out

    async def _call_tool(
        self, session_id: str, name: str, arguments: dict[str, Any] | str | None, role: str | None
    ) -> ToolOutput:
        multi = bool(self.env.roles)
        if multi:
            roles.check_role(self.env, role, component=self.component)
        spec = self.specs.get(name)
        if spec is None:
            raise NotFound(
                f"unknown tool {name!r}; tools: {', '.join(self.specs)}", component=self.component, field="tool"
            )
        args = _tool_arguments(spec, arguments)
        if isinstance(args, ToolOutput):
            await self.store.get(session_id)  # an unknown session is a 404 whatever the arguments
            return args
        kwargs = {k: getattr(args, k) for k in type(args).model_fields}
        method = getattr(self.env, spec.method_name)
        state_cls = self.env.State

        def finish(
            record: dict[str, Any], state: BaseModel, value: Any = None, error: ToolError | None = None
        ) -> ToolOutput:
            # Illegal actions may still change state on purpose (e.g. a wasted guess): always store it.
            record["state"] = state.model_dump(mode="json")
            out = (
                ToolOutput(output=f"error: {error}", is_error=True)
                if error is not None
                else ToolOutput(output=tool_output_text(value))
            )
            return roles.with_turn(self.env, state, out) if multi else out

        if not (spec.is_async or spec.blocking):

            def run_sync(record: dict[str, Any]) -> ToolOutput:
                # Inline: no await between load and store, so the memory store needs no lock.
                state = state_cls.model_validate(record["state"])
                refused = roles.refusal(self.env, spec, state, role) if multi else None
                if refused is not None:
                    return finish(record, state, error=refused)
                try:
                    return finish(record, state, method(state, **kwargs))
                except ToolError as exc:
                    return finish(record, state, error=exc)

            return await self.store.update(session_id, run_sync)

        async def run(record: dict[str, Any]) -> ToolOutput:
            state = state_cls.model_validate(record["state"])
            refused = roles.refusal(self.env, spec, state, role) if multi else None
            if refused is not None:
                return finish(record, state, error=refused)
            try:
                if spec.is_async:
                    value = await method(state, **kwargs)
                else:
                    value = await asyncio.to_thread(method, state, **kwargs)
            except ToolError as exc:
                return finish(record, state, error=exc)
            return finish(record, state, value)

        return await self.store.update(session_id, run)

    async def verify(self, session_id: str, request: VerifyRequest | dict[str, Any]) -> VerifyResult:
        if isinstance(request, dict):
            try:
                request = VerifyRequest.model_validate(request)
            except ValidationError as exc:
                raise BadRequest(
                    f"malformed verify request: {validation_summary(exc)}", component=self.component, field="body"
                ) from None
        if request.close and not self.env._holds_sessions:
            # nothing to release but the stored record: read and delete it in one store call
            result = await self._verify_record(await self.store.take(session_id), request)
            return result.model_copy(update={"closed": True})
        result = await self._verify_record(await self.store.get(session_id), request)
        if request.close:
            await self.close(session_id)
            result = result.model_copy(update={"closed": True})
        return result

    async def observe(self, session_id: str, role: str | None, *, peek: bool = False) -> RoleView:
        """What `role` of a multi-role session sees now, and whose turn it is (`peek`: the turn
        only, nothing marked as seen)."""
        return await roles.observe(self, session_id, role, peek=peek)

    def role_tools(self) -> dict[str, list[str]]:
        """A multi-role environment: each role's tool names (GET /roles)."""
        return roles.role_tools(self.env)

    async def _verify_record(self, record: dict[str, Any], request: VerifyRequest) -> VerifyResult:
        if self.env.roles:
            roles.check_role(self.env, request.role, component=self.component, field="role")
        state = self.env.State.model_validate(record["state"])
        result = self.env.verify(state, request)
        return await result if "verify" in self.env._async_hooks else result

    async def state(self, session_id: str) -> dict[str, Any]:
        """The raw session state (tests and debugging; not exposed on the public routes)."""
        return (await self.store.get(session_id))["state"]

    async def close(self, session_id: str) -> bool:
        # An environment holding per-session resources outside the store (e.g. an MCP connection)
        # releases them here; a session that is already gone has nothing to release.
        if self.env._holds_sessions:
            with contextlib.suppress(NotFound):
                record = await self.store.get(session_id)
                done = self.env.close_session(self.env.State.model_validate(record["state"]))
                if "close_session" in self.env._async_hooks:
                    await done
        return await self.store.delete(session_id)
