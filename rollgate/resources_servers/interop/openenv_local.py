"""An OpenEnv `Environment` class hosted in this process: one instance per episode with its own
worker thread (OpenEnv's server gives each session a single-thread executor too), `reset_async`
/ `step_async` where the class overrides them (as the server does), and an MCP-style
environment's `mcp_session()` held open for the episode. It answers the same dicts as a server's
WebSocket (openenv_targets.py), built by OpenEnv's own `serialize_observation`.

`openenv` is imported when the class is, never on Rollgate's start-up path (it takes seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from rollgate.core.errors import UpstreamError, UpstreamTimeout, validation_summary
from rollgate.resources_servers.interop.openenv_targets import COMPONENT, ActionRejected, Result


def import_target(path: str) -> Any:
    """`pkg.mod:Name` -> the object (ImportError / AttributeError say what is missing)."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def accepted_kwargs(fn: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The reset keys the method takes, as OpenEnv's server filters them (all, with **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return dict(data)
    return {k: v for k, v in data.items() if k in params}


def _declared_action(env_cls: type) -> type | None:
    """The Action class an Environment subclass declares: its `step(action: X)` annotation, else
    its generic base `Environment[X, ...]` (what `create_app` is otherwise told explicitly)."""
    import typing

    from openenv.core.env_server.types import Action

    def usable(t: Any) -> bool:
        return isinstance(t, type) and issubclass(t, Action) and t is not Action

    with contextlib.suppress(Exception):
        hinted = typing.get_type_hints(env_cls.step).get("action")
        if usable(hinted):
            return hinted
    for klass in env_cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            args = typing.get_args(base)
            if args and usable(args[0]):
                return args[0]
    return None


class OpenEnvClass:
    def __init__(self, path: str, env_cls: type, action_cls: type, *, kwargs: dict[str, Any] | None = None):
        self.path = path
        self.env_cls = env_cls
        self.action_cls = action_cls
        self.kwargs = dict(kwargs or {})

    @classmethod
    def load(cls, path: str, *, action_class: str | None = None, kwargs: dict[str, Any] | None = None) -> OpenEnvClass:
        """Import `module:Class` (and its Action). Raises ValueError saying which option is wrong."""
        from openenv.core.env_server.interfaces import Environment as OpenEnvBase
        from openenv.core.env_server.mcp_environment import MCPEnvironment
        from openenv.core.env_server.mcp_types import CallToolAction
        from openenv.core.env_server.types import Action

        try:
            env_cls = import_target(path)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"env_class: cannot import {path!r}: {type(exc).__name__}: {exc}") from None
        if not (isinstance(env_cls, type) and issubclass(env_cls, OpenEnvBase)):
            raise ValueError(f"env_class: {path!r} is not an OpenEnv Environment subclass")
        if action_class is not None:
            try:
                action = import_target(action_class)
            except (ImportError, AttributeError) as exc:
                raise ValueError(f"action_class: cannot import {action_class!r}: {type(exc).__name__}: {exc}") from None
            if not (isinstance(action, type) and issubclass(action, Action)):
                raise ValueError(f"action_class: {action_class!r} is not an OpenEnv Action subclass")
        elif issubclass(env_cls, MCPEnvironment):
            action = CallToolAction
        else:
            action = _declared_action(env_cls)
            if action is None:
                raise ValueError(
                    f"action_class: cannot tell the Action class of {path!r} from its step() annotation or "
                    'generic base: set action_class: "module:Action"'
                )
        return cls(path, env_cls, action, kwargs=kwargs)

    def describe(self) -> str:
        return f"OpenEnv environment {self.path} (in process)"

    def action_schema(self) -> dict[str, Any]:
        return self.action_cls.model_json_schema()

    async def open(self) -> _LocalEpisode:
        episode = _LocalEpisode(self)
        await episode.start()
        return episode


def _overrides(env: Any, method: str) -> bool:
    from openenv.core.env_server.interfaces import Environment as OpenEnvBase

    return getattr(type(env), method, None) is not getattr(OpenEnvBase, method)


class _LocalEpisode:
    def __init__(self, target: OpenEnvClass):
        self.target = target
        self.env: Any = None
        self.broken: str | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="openenv")
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._holder: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.broken is None

    def _failed(self, what: str, exc: BaseException) -> UpstreamError:
        return UpstreamError(
            f"{self.target.describe()} raised {type(exc).__name__} during {what}: {exc}", component=COMPONENT
        )

    async def _in_thread(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    async def start(self) -> None:
        try:
            self.env = await self._in_thread(self.target.env_cls, **self.target.kwargs)
        except Exception as exc:  # noqa: BLE001
            self._executor.shutdown(wait=False)
            raise self._failed("construction", exc) from None
        session = getattr(self.env, "mcp_session", None)
        if callable(session):  # an MCP-style environment: its MCP client stays open for the episode
            ready: asyncio.Future = asyncio.get_running_loop().create_future()
            self._holder = asyncio.get_running_loop().create_task(self._hold(session, ready))
            try:
                await ready
            except Exception as exc:  # noqa: BLE001
                await self.aclose()
                raise self._failed("opening its MCP session", exc) from None

    async def _hold(self, session: Any, ready: asyncio.Future) -> None:
        try:
            async with session():
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - reported by start(), or marks the episode broken
            if not ready.done():
                ready.set_exception(exc)
            else:
                self.broken = f"its MCP session failed: {type(exc).__name__}: {exc}"

    async def _call(self, method: str, what: str, timeout_s: float, *args: Any, **kwargs: Any) -> Any:
        async with self._lock:
            if self.broken is not None:
                raise UpstreamError(
                    f"{self.target.describe()}: this episode is gone ({self.broken})", component=COMPONENT
                )
            if _overrides(self.env, f"{method}_async"):
                work = getattr(self.env, f"{method}_async")(*args, **kwargs)
            else:
                work = self._in_thread(getattr(self.env, method), *args, **kwargs)
            try:
                return await asyncio.wait_for(work, timeout_s)
            except asyncio.CancelledError:
                self.broken = f"cancelled during {what}"  # the step may still be running in its thread
                raise
            except TimeoutError:
                # A thread cannot be stopped: the episode is given up and its thread left to finish.
                self.broken = f"{what} ran over {timeout_s:g}s"
                raise UpstreamTimeout(
                    f"{self.target.describe()} did not finish {what} within {timeout_s:g}s", component=COMPONENT
                ) from None
            except Exception as exc:  # noqa: BLE001 - the environment's own failure, not the model's
                raise self._failed(what, exc) from None

    async def reset(self, data: dict[str, Any], timeout_s: float) -> Result:
        from openenv.core.env_server.serialization import serialize_observation

        fn = self.env.reset_async if _overrides(self.env, "reset_async") else self.env.reset
        obs = await self._call("reset", "reset", timeout_s, **accepted_kwargs(fn, data))
        return serialize_observation(obs)

    async def step(self, action: dict[str, Any], timeout_s: float) -> Result:
        from openenv.core.env_server.serialization import deserialize_action, serialize_observation

        try:
            parsed = deserialize_action(action, self.target.action_cls)
        except ValidationError as exc:
            raise ActionRejected(validation_summary(exc, default="action")) from None
        return serialize_observation(await self._call("step", "step", timeout_s, parsed))

    async def aclose(self) -> None:
        self.broken = self.broken or "closed"
        self._stop.set()
        if self._holder is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._holder), 5.0)
            except (TimeoutError, Exception):  # noqa: BLE001 - a stuck MCP session is cancelled instead
                self._holder.cancel()
        if self.env is not None:
            # close() runs on the episode's thread, after whatever still runs there: a step that
            # ran over its timeout is not waited for, close() is queued behind it.
            closing = asyncio.get_running_loop().run_in_executor(self._executor, self.env.close)
            closing.add_done_callback(lambda f: f.cancelled() or f.exception())  # a failed close is not news
            if self.broken == "closed":
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closing, 5.0)
        self._executor.shutdown(wait=False)
