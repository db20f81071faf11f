"""An environment that drives a running, unmodified NeMo Gym (0.7) resources server over its own
HTTP protocol (docs/interop.md, "Run NeMo Gym resources servers").

    envs:
      - {name: ng_weather, kind: nemo_gym, urls: ["http://127.0.0.1:9001"], tool_timeout_s: 30}

- build: `GET /openapi.json` of every replica; each `POST /<name>` route that is not part of the
  protocol (seed_session, verify, close_session, aggregate_metrics, ...) is a tool, its request
  body's schema the parameters. A server with a catch-all `POST /{name}` route takes its tool
  names from each row's `responses_create_params.tools`. An unreachable replica fails the build.
- seed: `POST /seed_session` with the row; the session cookie it sets
  (`<ServerClass>___<server name>`) is kept in the State with the replica's URL, so the session
  stays pinned to the replica that holds it.
- tool: `POST /<tool>` with the arguments and the cookies; the answer's body is the output, as
  NeMo Gym's own agents pass it to the model. 400/404/409/422 are tool errors the model reads.
- verify: `POST /verify` with the row's fields, its responses_create_params and a Responses-API
  `response` built from the transcript; the reward (and reward components) come from the answer.

Anything else (unreachable, 5xx, malformed JSON, no reward, a masked sample, past the timeout)
raises UpstreamError naming "NeMo Gym server <url>": the episode ends env_error, never reward 0.
The model reaches tool routes only: a name that is a protocol route, not one path segment, or
not among the row's tools is refused before anything is sent.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollgate.core.errors import ProtocolError, UpstreamError
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, ToolSpec
from rollgate.resources_servers.external import configured_spec, parse_options
from rollgate.resources_servers.interop import nemo_gym_wire as wire
from rollgate.resources_servers.interop.nemo_gym_http import (
    COMPONENT,
    NemoGymHttp,
    describe,
    get_openapi,
    read_json,
    snippet,
)
from rollgate.resources_servers.interop.tool_specs import PerInstance, SchemaToolSpec, bind_tool
from rollgate.resources_servers.registry import EnvSpec

log = logging.getLogger("rollgate.interop.nemo_gym")

# Statuses NeMo Gym servers use for "that call was wrong": the model reads the body. FastAPI
# answers 404 for a route it lacks and 422 for arguments that fail the route's body model.
TOOL_ERROR_STATUSES = frozenset({400, 404, 409, 422})
MAX_DYNAMIC_TOOLS = 1024  # catch-all servers: tool names remembered at once (least recently used go)


class NemoGymState(BaseModel):
    """Plain JSON in the session store: where the session lives, its cookies, and the row (verify
    sends the row's fields and responses_create_params back to the server)."""

    url: str
    cookies: dict[str, str] = Field(default_factory=dict)
    row: dict[str, Any]


class _ToolTable(Mapping[str, ToolSpec]):
    """The runtime's view of the tools: the discovered routes, listed; any other name gets a spec
    on first use, so that `_call` decides per session (the row's tools) what happens to it: an
    error the model reads, a schema mismatch naming the server, or, on a catch-all server, a call."""

    def __init__(self, fixed: dict[str, SchemaToolSpec], make, forget):
        self.fixed = fixed
        self.make = make
        self.forget = forget
        self.dynamic: OrderedDict[str, SchemaToolSpec] = OrderedDict()

    def __getitem__(self, name: str) -> ToolSpec:
        spec = self.fixed.get(name)
        if spec is not None:
            return spec
        if not isinstance(name, str):
            raise KeyError(name)
        spec = self.dynamic.get(name)
        if spec is not None:
            self.dynamic.move_to_end(name)
            return spec
        spec = self.dynamic[name] = self.make(name)
        while len(self.dynamic) > MAX_DYNAMIC_TOOLS:
            _, old = self.dynamic.popitem(last=False)
            self.forget(old)
        return spec

    def __iter__(self) -> Iterator[str]:
        return iter(self.fixed)

    def __len__(self) -> int:
        return len(self.fixed)


class NemoGymEnvironment(Environment):
    """A NeMo Gym resources server (one or more replicas of it). Built by `spec_from_config` for
    an `envs` entry, or directly: `NemoGymEnvironment(["http://127.0.0.1:9001"])`."""

    name = "nemo_gym"
    description = "a NeMo Gym resources server"
    reverify = "never"  # the server's session state is not rebuilt from a stored trajectory
    State = NemoGymState

    def __init__(
        self,
        urls: list[str],
        *,
        tool_timeout_s: float = 30.0,
        verify_timeout_s: float = 120.0,
        seed_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        http_500_to_model: bool = False,
    ):
        if isinstance(urls, str) or not urls:
            raise ValueError("NemoGymEnvironment needs a non-empty list of server URLs")
        self.urls = [u.rstrip("/") for u in urls]
        self.tool_timeout_s = tool_timeout_s
        self.verify_timeout_s = verify_timeout_s
        self.seed_timeout_s = seed_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.http_500_to_model = http_500_to_model
        self._next_replica = itertools.count()
        self._http = NemoGymHttp()
        self._dynamic_attrs = itertools.count()
        self._table = self._discover()

    # --- tools: discovered at build ------------------------------------------------------
    def _discover(self) -> _ToolTable:
        found: wire.Discovered | None = None
        first = ""
        for url in self.urls:
            here = self._read_openapi(url)
            if found is None:
                found, first = here, url
            elif set(here.tools) != set(found.tools) or here.catch_all != found.catch_all:
                raise UpstreamError(
                    f"{describe(url)} serves other tools than {describe(first)} "
                    f"({sorted(here.tools)} vs {sorted(found.tools)}): replicas must run the same server",
                    component=COMPONENT,
                )
        assert found is not None
        fixed = {name: self._spec(name, desc, schema) for name, (desc, schema) in found.tools.items()}
        self.catch_all = found.catch_all
        return _ToolTable(fixed, self._dynamic_spec, lambda spec: delattr(self, spec.method_name))

    def _read_openapi(self, url: str) -> wire.Discovered:
        doc = get_openapi(url, self.connect_timeout_s)
        try:
            return wire.discover(doc)
        except ValueError as exc:
            raise ProtocolError(
                f"{describe(url)}: GET /openapi.json is not a FastAPI OpenAPI document: {exc}", component=COMPONENT
            ) from None

    def _spec(self, name: str, description: str, schema: dict[str, Any]) -> SchemaToolSpec:
        return bind_tool(self, f"_ng_tool_{next(self._dynamic_attrs)}", self._call, name, description, schema)

    def _dynamic_spec(self, name: str) -> SchemaToolSpec:
        # The schema the model saw is the row's; the server checks the arguments itself.
        return self._spec(name, "", {"type": "object", "properties": {}})

    tool_specs = PerInstance(lambda env: {} if env is None else env._table)  # type: ignore[assignment]
    tool_schemas = PerInstance(  # type: ignore[assignment]
        lambda env: [] if env is None else [s.openai_schema() for s in env._table.fixed.values()]
    )

    @staticmethod
    def _keep_cookies(state: NemoGymState, jar: dict[str, str | None]) -> None:
        for key, value in jar.items():
            if value is None:
                state.cookies.pop(key, None)
            else:
                state.cookies[key] = value

    async def aclose(self) -> None:
        """Close the connection pool (shutdown and tests)."""
        await self._http.aclose()

    # --- the protocol --------------------------------------------------------------------
    def _replica_order(self) -> list[str]:
        start = next(self._next_replica) % len(self.urls)
        return self.urls[start:] + self.urls[:start]

    async def seed(self, task: TaskRow, rng) -> NemoGymState:  # type: ignore[override]
        # The row as NeMo Gym's agents send it: its fields and responses_create_params
        # (`env` is Rollgate's routing, not the server's business).
        row = {k: v for k, v in task.row().items() if k != "env"}
        unreachable: UpstreamError | None = None
        for url in self._replica_order():
            try:
                status, raw, jar = await self._http.post(url, "seed_session", row, {}, self.seed_timeout_s)
            except UpstreamError as exc:
                if getattr(exc, "not_sent", False):  # no session exists yet: another replica may take it
                    unreachable = exc
                    log.warning("%s; trying the next replica", exc.message)
                    continue
                raise
            if 400 <= status < 500:  # the runtime reports it as a bad row, not a server failure
                raise ValueError(
                    f"{describe(url)} refused the row at POST /seed_session: HTTP {status}: {snippet(raw)}"
                )
            if status >= 300:
                raise UpstreamError(
                    f"{describe(url)} answered HTTP {status} to POST /seed_session: {snippet(raw)}",
                    component=COMPONENT,
                    status=status,
                )
            if raw.strip():
                read_json(raw, url, "POST /seed_session")
            state = NemoGymState(url=url, row=row)
            self._keep_cookies(state, jar)
            return state
        assert unreachable is not None
        raise unreachable

    def _check_callable(self, name: str, state: NemoGymState) -> None:
        """Only tools: a name the task does not offer is an error the model reads; one it offers
        that the server cannot serve as a tool (a protocol route, or no such route) is a schema
        mismatch, an environment failure. Neither is ever sent."""
        offered = wire.row_tool_names(state.row)
        if name not in (offered or self._table.fixed):
            listed = ", ".join(offered or self._table.fixed)
            raise ToolError(f"unknown tool {name!r}; {'this task offers' if offered else 'tools'}: {listed}")
        if name in self._table.fixed:
            return
        if not wire.callable_name(name):
            raise UpstreamError(
                f"{describe(state.url)}: the task offers a tool {name!r}, which is not a tool route "
                "(a protocol route or not one path segment): it is never called",
                component=COMPONENT,
            )
        if not self.catch_all:
            raise UpstreamError(
                f"{describe(state.url)} has no tool route /{name}, which the task offers "
                f"(its tools: {', '.join(self._table.fixed) or 'none'})",
                component=COMPONENT,
            )

    async def _call(self, name: str, state: NemoGymState, root: dict[str, Any]) -> str:
        self._check_callable(name, state)
        status, raw, jar = await self._http.post(state.url, name, root, state.cookies, self.tool_timeout_s)
        self._keep_cookies(state, jar)
        text = raw.decode("utf-8", errors="replace")
        if status in TOOL_ERROR_STATUSES or (status == 500 and self.http_500_to_model and raw.strip()):
            raise ToolError(text or f"HTTP {status}")
        if status >= 300:
            raise UpstreamError(
                f"{describe(state.url)} answered HTTP {status} to tool {name}: {snippet(raw)}",
                component=COMPONENT,
                status=status,
            )
        if raw.strip():
            read_json(raw, state.url, f"tool {name}")  # the body goes to the model as is, but must be JSON
        return text

    async def verify(self, state: NemoGymState, request: VerifyRequest) -> VerifyResult:  # type: ignore[override]
        body = {**state.row, "response": wire.response_object(state.row, request)}
        status, raw, _ = await self._http.post(state.url, "verify", body, state.cookies, self.verify_timeout_s)
        if status >= 300:
            raise UpstreamError(
                f"{describe(state.url)} answered HTTP {status} to POST /verify: {snippet(raw)}",
                component=COMPONENT,
                status=status,
            )
        try:
            return wire.read_verdict(read_json(raw, state.url, "POST /verify"), set(state.row))
        except wire.VerdictError as exc:
            raise ProtocolError(f"{describe(state.url)}: POST /verify: {exc}", component=COMPONENT) from None


# --- configuration: `envs: [{name, kind: nemo_gym, ...}]` (resources_servers/external.py) -----
_URL = re.compile(r"^https?://[^/\s]+(/\S*)?$")


class NemoGymEntry(BaseModel):
    """The options of a `kind: nemo_gym` entry."""

    model_config = ConfigDict(extra="forbid")
    name: str
    urls: list[str] = Field(
        min_length=1, description="the server's replicas; a session stays on the one that seeded it"
    )
    tool_timeout_s: float = Field(default=30.0, gt=0)
    verify_timeout_s: float = Field(default=120.0, gt=0, description="LLM-judge servers take a while")
    seed_timeout_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0, description="reading /openapi.json at start-up")
    http_500_to_model: bool = Field(
        default=False,
        description="show a tool route's HTTP 500 body to the model (servers that report tool errors "
        "as 500, as NeMo Gym's own agent does) instead of ending the episode env_error",
    )
    description: str = ""

    @field_validator("urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for u in urls:
            if not _URL.match(u):
                raise ValueError(f"expected http(s)://host:port URLs, got {u!r}")
        if len({u.rstrip("/") for u in urls}) != len(urls):
            raise ValueError("a URL is listed twice")
        return [u.rstrip("/") for u in urls]


def spec_from_config(options: dict[str, Any], where: str) -> EnvSpec:
    """The EnvSpec of one entry. Nothing is contacted here: building the environment (start-up of
    the process that serves it) reads each replica's /openapi.json and fails naming the URL."""
    entry = parse_options(NemoGymEntry, options, where)
    return configured_spec(
        NemoGymEnvironment,
        name=entry.name,
        kind="nemo_gym",
        description=entry.description or f"NeMo Gym resources server at {', '.join(entry.urls)}",
        where=where,
        build=lambda cls: cls(
            entry.urls,
            tool_timeout_s=entry.tool_timeout_s,
            verify_timeout_s=entry.verify_timeout_s,
            seed_timeout_s=entry.seed_timeout_s,
            connect_timeout_s=entry.connect_timeout_s,
            http_500_to_model=entry.http_500_to_model,
        ),
    )
