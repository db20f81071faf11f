"""The `nemo_gym` environment kind against a stand-in NeMo Gym server on loopback
(tests/interop/nemo_gym_standin.py: real NeMo Gym needs Python 3.13 and ~40 s to start, so it runs
in the `nemo_gym` tier, test_nemo_gym_real.py). Rollgate's real agent loop plays the episodes with
the scripted model backend. A server that is unreachable, answers 5xx or malformed JSON, or takes
longer than the tool timeout ends the episode env_error naming its URL, never reward 0; the model
can reach tool routes only."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jsonschema
import pytest
import uvicorn

from rollgate.agent_server.agent import Agent
from rollgate.core.errors import BadRequest, UpstreamError
from rollgate.core.rows import parse_row
from rollgate.core.schemas import Outcome
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import AgentSettings, Settings
from rollgate.model_server.client import LocalModelClient
from rollgate.model_server.server import build_service
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import LocalEnvClient
from rollgate.resources_servers.interop import nemo_gym_wire as wire
from rollgate.resources_servers.interop.nemo_gym import NemoGymEnvironment, spec_from_config
from rollgate.stack.parts import local_stack
from tests.conftest import free_port
from tests.interop.nemo_gym_standin import build
from tests.lax_model import LaxModelServer

STANDIN = str(Path(__file__).with_name("nemo_gym_standin.py"))
PROTOCOL = ["seed_session", "verify", "close_session", "aggregate_metrics", "reverify_mode"]
R = "#/components/schemas/"
INVENTED = [*PROTOCOL, "Verify", "SEED_SESSION", "../verify", "verify?x=1", "/verify", "openapi.json", "mcp"]


class Standin:
    """The stand-in server on a free loopback port: in a thread of this process (fast to start),
    or as a process of its own where a test needs it to die mid-request."""

    def __init__(self, mode: str = "fixed", *, process: bool = False):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        if process:
            self.proc = subprocess.Popen([sys.executable, STANDIN, str(port), mode], stderr=subprocess.DEVNULL)
        else:
            config = uvicorn.Config(
                build(mode),
                host="127.0.0.1",
                port=port,
                log_level="warning",
                lifespan="off",
                timeout_graceful_shutdown=2,
            )
            self.server = uvicorn.Server(config)
            self.thread = threading.Thread(target=self.server.run, daemon=True)
            self.thread.start()
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{self.url}/_calls", timeout=1)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                    self.stop()
                    raise RuntimeError("the stand-in NeMo Gym server did not start") from None
                time.sleep(0.05)

    def calls(self) -> dict[str, int]:
        return httpx.get(f"{self.url}/_calls", timeout=5).json()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        else:
            self.server.should_exit = True
            self.thread.join(10)


@pytest.fixture(scope="module")
def server():
    s = Standin()
    yield s
    s.stop()


@pytest.fixture
def scripted(tiny_model_dir):
    return build_service(Settings(model={"backend": "scripted", "model_path": tiny_model_dir}))


def call(name: str, **arguments) -> dict:
    return {"call": {"name": name, "arguments": arguments}}


def row(*turns, expected: int = 7, tools: list | None = None, **fields) -> dict:
    params: dict = {"input": "count to the target", "metadata": {"rollgate_script": json.dumps(turns)}}
    if tools is not None:
        params["tools"] = tools
    return {"responses_create_params": params, "env": "nemo_gym", "expected_total": expected, **fields}


def outputs(traj) -> list[str]:
    return [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]


async def play(service, env: NemoGymEnvironment, *tasks: dict):
    runtime = EnvRuntime(env, MemorySessionStore())
    clients = {env.name: LocalEnvClient(runtime)}
    agent = Agent(LocalModelClient(service), clients, AgentSettings(max_turns=32), model_name=service.served_name)
    try:
        runs = [agent.run(parse_row(t, known_envs=agent.envs)) for t in tasks]
        return await asyncio.gather(*runs)
    finally:
        await env.aclose()


def test_tools_come_from_openapi_and_protocol_routes_are_never_tools(server):
    env = NemoGymEnvironment([server.url])
    schemas = {t["name"]: t for t in env.tool_schemas()}
    assert set(schemas) == {"add", "read_total", "refuse", "boom", "garbage", "slow", "quit"}
    add = schemas["add"]["parameters"]  # the body model's $ref, inlined
    assert add["properties"]["amount"]["type"] == "integer" and add["required"] == ["amount"]
    assert schemas["add"]["description"] == "Add an amount to the session's total."
    assert NemoGymEnvironment.tool_specs() == {}  # the class knows none: the server is asked at build


async def test_an_episode_plays_over_the_servers_own_protocol_with_its_session_cookie(server, scripted):
    env = NemoGymEnvironment([server.url])
    first, second = await play(
        scripted,
        env,
        row(call("add", amount=3), call("add", amount=4), call("read_total"), {"text": "7"}),
        row(call("add", amount=2), {"text": "2"}, expected=2),
    )
    for traj in (first, second):
        assert traj.outcome is Outcome.completed, traj.error
        assert traj.reward == 1.5 and traj.reward_components == {"state": 1.0, "answer": 0.5}
    # the session cookie carried the server's per-session total from call to call, and apart
    assert outputs(first) == ['{"total":3}', '{"total":7}', '{"total":7}']
    assert outputs(second) == ['{"total":2}'] and second.metrics["total_seen"] == 2


async def test_bad_arguments_and_error_text_are_outputs_the_model_reads(server, scripted):
    env = NemoGymEnvironment([server.url])
    (traj,) = await play(scripted, env, row(call("add", amount="three"), call("refuse"), {"text": "0"}, expected=0))
    assert traj.outcome is Outcome.completed, traj.error
    bad, refused = outputs(traj)
    assert bad.startswith("error: ") and '"amount"' in bad  # the server's 422 body
    assert refused == '"error: the counter refuses"'  # HTTP 200 with error text: the body as is
    assert traj.reward == 1.5 and traj.metrics["tool_errors"] == 1


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ("boom", "answered HTTP 500 to tool boom: \"RuntimeError('the tool crashed')\""),
        ("garbage", "answered tool garbage with malformed JSON"),
        ("slow", "did not answer POST /slow within 0.5s"),
    ],
)
async def test_a_failing_tool_route_ends_the_episode_env_error_naming_the_server(server, scripted, tool, says):
    env = NemoGymEnvironment([server.url], tool_timeout_s=0.5)
    (traj,) = await play(scripted, env, row(call("add", amount=1), call(tool), {"text": "1"}))
    assert traj.outcome is Outcome.env_error and traj.reward is None
    assert traj.error.component == "nemo_gym"
    assert f"NeMo Gym server {server.url} {says}" in traj.error.message
    assert traj.timings.tools_s < 0.5 + 2  # the timeout bounds the tool phase: no hang


async def test_a_500_can_be_shown_to_the_model_as_nemo_gyms_agent_does(server, scripted):
    env = NemoGymEnvironment([server.url], http_500_to_model=True)
    (traj,) = await play(scripted, env, row(call("boom"), {"text": "0"}, expected=0))
    assert traj.outcome is Outcome.completed and "the tool crashed" in outputs(traj)[0]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"mask": True}, "POST /verify: the server masked this sample"),
        ({"verify_garbage": True}, "answered POST /verify with malformed JSON"),
    ],
)
async def test_a_verify_that_gives_no_valid_reward_is_env_error(server, scripted, fields, says):
    env = NemoGymEnvironment([server.url])
    (traj,) = await play(scripted, env, row(call("add", amount=7), {"text": "7"}, **fields))
    assert traj.outcome is Outcome.env_error and traj.reward is None
    assert says in traj.error.message and server.url in traj.error.message


async def test_a_row_the_server_refuses_at_seed_is_a_bad_row_not_a_reward(server, scripted):
    env = NemoGymEnvironment([server.url])
    (traj,) = await play(scripted, env, row({"text": "0"}, start="zero"))
    assert traj.outcome is Outcome.env_error and traj.reward is None
    assert f"NeMo Gym server {server.url} refused the row at POST /seed_session: HTTP 422" in traj.error.message


def test_building_against_an_unreachable_server_fails_naming_its_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UpstreamError, match=f"NeMo Gym server {url} is unreachable"):
        NemoGymEnvironment([url], connect_timeout_s=2)


async def test_a_server_gone_mid_episode_is_env_error_and_the_rest_of_the_job_goes_on(scripted):
    doomed, alive = Standin(process=True), Standin()
    try:
        env = NemoGymEnvironment([doomed.url])
        ok_env = NemoGymEnvironment([alive.url])
        (gone,) = await play(scripted, env, row(call("add", amount=1), call("quit"), call("add", amount=1)))
        assert gone.outcome is Outcome.env_error and gone.reward is None
        assert f"NeMo Gym server {doomed.url}" in gone.error.message
        # after the exit, nothing listens: the next episode's seed names the URL too
        (unreachable,) = await play(scripted, env, row({"text": "0"}))
        assert unreachable.outcome is Outcome.env_error and unreachable.reward is None
        assert f"NeMo Gym server {doomed.url}" in unreachable.error.message
        (fine,) = await play(scripted, ok_env, row(call("add", amount=7), {"text": "7"}))
        assert fine.outcome is Outcome.completed and fine.reward == 1.5
    finally:
        doomed.stop()
        alive.stop()


async def test_the_model_reaches_tool_routes_only_whatever_name_it_invents(server, scripted):
    env = NemoGymEnvironment([server.url])
    tools = env.tool_schemas()
    before = server.calls()
    # 1) through the agent: names the task does not offer never leave it
    invented = [call(n) for n in INVENTED]
    lax = LaxModelServer(scripted, INVENTED)  # Rollgate's own model server never returns these calls
    (traj,) = await play(lax, env, row(*invented, call("add", amount=7), {"text": "7"}, tools=tools))
    assert traj.outcome is Outcome.completed and traj.reward == 1.5
    assert all(o.startswith("error: unknown tool") for o in outputs(traj)[: len(INVENTED)])
    # 2) straight to the runtime (what the HTTP routes call): an error output, nothing sent
    runtime = EnvRuntime(env, MemorySessionStore())
    seeded = await runtime.seed(runtime.parse(row(tools=tools)))
    for name in [*INVENTED, ""]:
        out = await runtime.call_tool(seeded.session_id, name, {})
        assert out.is_error and out.output.startswith(f"error: unknown tool {name!r}"), name
    # 3) a row that offers protocol routes as tools: a schema mismatch naming the server, nothing sent
    hostile = [*tools, *({"type": "function", "name": n, "parameters": {}} for n in INVENTED)]
    seeded = await runtime.seed(runtime.parse(row(tools=hostile)))
    for name in INVENTED:
        with pytest.raises(UpstreamError, match=f"NeMo Gym server {server.url}: the task offers a tool"):
            await runtime.call_tool(seeded.session_id, name, {})
    # a tool without a name is refused with the row, before anything is seeded
    with pytest.raises(BadRequest, match=rf"tools\[{len(hostile)}\]\.name: must be a non-empty string"):
        runtime.parse(row(tools=[*hostile, {"type": "function", "name": "", "parameters": {}}]))
    await env.aclose()
    after = server.calls()
    # one episode and two direct seeds: three seeds, one verify; no other protocol route was reached
    assert after.get("/seed_session", 0) - before.get("/seed_session", 0) == 3
    assert after.get("/verify", 0) - before.get("/verify", 0) == 1
    for route in ("/close_session", "/aggregate_metrics", "/reverify_mode", "/Verify", "/SEED_SESSION", "/mcp"):
        assert after.get(route, 0) == before.get(route, 0), route


async def test_a_catch_all_server_takes_its_tools_from_the_row_and_still_only_tools(scripted):
    server = Standin("catchall")
    try:
        env = NemoGymEnvironment([server.url])
        assert env.tool_schemas() == []  # no named routes: the row says which tools exist
        tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("add", "ghost")]
        script = [call("add", amount=7), call("ghost"), call("read_total"), {"text": "7"}]
        (traj,) = await play(LaxModelServer(scripted, ["read_total"]), env, row(*script, tools=tools))
        assert traj.outcome is Outcome.completed, traj.error
        add, ghost, unknown = outputs(traj)
        assert add == '{"total":7}' and ghost.startswith("error: ") and "no tool ghost" in ghost  # its 404
        assert unknown.startswith("error: unknown tool 'read_total'")  # not offered: not sent
        assert traj.reward == 1.5 and "/read_total" not in server.calls()
        # a row that offers a protocol route: the catch-all would take it, so it is never sent
        before = server.calls()
        tools.append({"type": "function", "name": "verify", "parameters": {}})
        (traj,) = await play(scripted, env, row(call("verify"), {"text": "0"}, tools=tools))
        assert traj.outcome is Outcome.env_error and traj.reward is None
        assert f"NeMo Gym server {server.url}: the task offers a tool 'verify'" in traj.error.message
        assert server.calls().get("/verify", 0) == before.get("/verify", 0)
    finally:
        server.stop()


async def test_sessions_stay_on_the_replica_that_seeded_them(scripted):
    a, b = Standin(), Standin()
    try:
        env = NemoGymEnvironment([a.url, b.url])
        trajs = await play(
            scripted, env, *(row(call("add", amount=7), call("read_total"), {"text": "7"}) for _ in range(4))
        )
        assert [t.outcome for t in trajs] == [Outcome.completed] * 4 and {t.reward for t in trajs} == {1.5}
        for s in (a, b):  # two sessions each, and each session's calls went where it was seeded
            calls = s.calls()
            assert calls["/seed_session"] == calls["/add"] == calls["/read_total"] == calls["/verify"] == 2
        b.stop()  # a replica gone before seeding: new sessions go to the other one
        trajs = await play(scripted, env, row(call("add", amount=7), {"text": "7"}), row({"text": "0"}, expected=0))
        assert [t.reward for t in trajs] == [1.5, 1.5]
        assert a.calls()["/seed_session"] == 4
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"urls": []}, "envs[0] (ng).urls: List should have at least 1 item"),
        ({"urls": ["127.0.0.1:9"]}, "envs[0] (ng).urls: expected http(s)://host:port URLs"),
        ({"urls": ["http://127.0.0.1:9"], "tool_timeout_s": 0}, "envs[0] (ng).tool_timeout_s"),
        ({"urls": ["http://127.0.0.1:9"], "url": "http://127.0.0.1:9"}, "envs[0] (ng).url: Extra inputs"),
        ({}, "envs[0] (ng).urls: Field required"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_entry_and_the_field(options, says):
    with pytest.raises(BadRequest) as err:
        spec_from_config({"name": "ng", **options}, "envs[0] (ng)")
    assert err.value.message.startswith("envs[0] (ng)") and says in err.value.message


async def test_a_configured_entry_collects_through_the_local_stack(server, tiny_model_dir):
    entry = {"name": "ng_counter", "kind": "nemo_gym", "urls": [server.url], "tool_timeout_s": 5}
    settings = Settings(envs=["math", entry], model={"backend": "scripted", "model_path": tiny_model_dir})
    stack = local_stack(settings)
    try:
        assert set(stack.runtimes) == {"math", "ng_counter"}
        rows = [row(call("add", amount=n), {"text": str(n)}, expected=n) for n in range(1, 5)]
        rows.insert(2, row(call("boom"), {"text": "0"}))
        tasks = [parse_row({**r, "env": "ng_counter"}, known_envs=stack.agent.envs) for r in rows]
        trajs = await asyncio.gather(*(stack.agent.run(t) for t in tasks))
        assert [t.outcome for t in trajs] == [Outcome.completed] * 2 + [Outcome.env_error] + [Outcome.completed] * 2
        assert [t.reward for t in trajs] == [1.5, 1.5, None, 1.5, 1.5]
        assert server.url in trajs[2].error.message
    finally:
        await stack.aclose()


def test_a_recursive_body_schema_keeps_its_definitions():
    doc = {
        "paths": {
            "/plant": {"post": {"requestBody": {"content": {"application/json": {"schema": {"$ref": R + "Tree"}}}}}}
        },
        "components": {
            "schemas": {
                "Tree": {"title": "Tree", "type": "object", "properties": {"kids": {"items": {"$ref": R + "Tree"}}}}
            }
        },
    }
    schema = wire.discover(doc).tools["plant"][1]
    assert schema["properties"]["kids"]["items"] == {"$ref": "#/$defs/Tree"} and "Tree" in schema["$defs"]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert not jsonschema.Draft202012Validator(schema).is_valid({"kids": [{"kids": [1]}]})


def test_reward_components_are_kept_only_when_they_sum_to_the_reward():
    ok = wire.read_verdict({"reward": 2.0, "reward_components": {"a": 1.0, "b": 1.0}, "accuracy": True}, set())
    assert ok.reward_components == {"a": 1.0, "b": 1.0} and ok.metrics == {"accuracy": True}
    weighted = wire.read_verdict({"reward": 0.5, "reward_components": {"a": 1.0, "b": 1.0}}, set())
    assert weighted.reward_components is None and weighted.metrics["reward_components"] == {"a": 1.0, "b": 1.0}
    for bad in ({"reward": True}, {"reward": "1"}, {"reward": float("nan")}, {}):
        with pytest.raises(wire.VerdictError, match="no numeric `reward`"):
            wire.read_verdict(bad, set())
