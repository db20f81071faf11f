"""The `openenv` kind: unmodified OpenEnv environments (openenv 0.10) played by Rollgate's real agent
loop with the scripted model backend. Environments are written against OpenEnv's own interfaces
(tests/interop/openenv_envs.py), hosted in process by "module:Class" and served by OpenEnv's own
server (`create_app`, on loopback in a thread). The one fake is a WebSocket server that sends
frames no real OpenEnv server sends (malformed ones), to check that they end in env_error.

The module pays `import openenv.core` once (a module-scoped fixture; it takes seconds).
`openenv init`'s template served by uvicorn is in test_openenv_template.py (slow tier)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from http import HTTPStatus

import pytest

pytest.importorskip("openenv", reason='OpenEnv tests need the optional extra "interop" (pip install -e ".[interop]")')

from rollgate.agent_server.agent import Agent  # noqa: E402
from rollgate.core.errors import BadRequest, NotFound, ProtocolError, UpstreamError  # noqa: E402
from rollgate.core.rows import parse_row  # noqa: E402
from rollgate.core.schemas import Outcome  # noqa: E402
from rollgate.core.serving import serve_in_thread  # noqa: E402
from rollgate.core.session_store import MemorySessionStore  # noqa: E402
from rollgate.core.settings import AgentSettings, Settings  # noqa: E402
from rollgate.model_server.client import LocalModelClient  # noqa: E402
from rollgate.model_server.server import build_service  # noqa: E402
from rollgate.resources_servers.base import EnvRuntime  # noqa: E402
from rollgate.resources_servers.client import LocalEnvClient  # noqa: E402
from rollgate.resources_servers.interop.openenv_env import OpenEnvEnvironment, spec_from_config  # noqa: E402
from rollgate.resources_servers.interop.openenv_local import OpenEnvClass  # noqa: E402
from rollgate.resources_servers.interop.openenv_targets import OpenEnvServer  # noqa: E402
from rollgate.stack.parts import local_stack  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.lax_model import LaxModelServer

COUNTER = "tests.interop.openenv_envs:CounterEnvironment"
FAULTY = "tests.interop.openenv_envs:FaultyCounter"
NOTES = "tests.interop.openenv_envs:NotesEnvironment"
RESERVED = ["reset", "state", "close", "verify", "seed", "mcp", "list_tools", "call_tool"]


@pytest.fixture(scope="module")
def oe():
    """The test environments module: importing it imports openenv.core, once per module."""
    import tests.interop.openenv_envs as module

    return module


@pytest.fixture(scope="module")
def counter_url(oe):
    with serve_in_thread(oe.counter_app) as url:
        yield url


@pytest.fixture(scope="module")
def notes_url(oe):
    with serve_in_thread(oe.notes_app) as url:
        yield url


@pytest.fixture(scope="module")
def service(tiny_model_dir):
    return build_service(Settings(model={"backend": "scripted", "model_path": tiny_model_dir}))


def row(*turns, seed: int = 5, **fields) -> dict:
    script = json.dumps(turns)
    return {
        "responses_create_params": {"input": "play", "metadata": {"rollgate_script": script}},
        "seed": seed,
        **fields,
    }


def step(amount) -> dict:
    return {"call": {"name": "step", "arguments": {"amount": amount}}}


def call(name: str, **arguments) -> dict:
    return {"call": {"name": name, "arguments": arguments}}


async def play(service, env: OpenEnvEnvironment, task: dict):
    agent = Agent(
        LocalModelClient(service),
        {env.name: LocalEnvClient(EnvRuntime(env, MemorySessionStore()))},
        AgentSettings(),
        model_name="rollgate-tiny",
    )
    try:
        return await agent.run(parse_row({**task, "env": env.name}, known_envs=agent.envs))
    finally:
        await env.aclose()


def outputs(traj) -> list[str]:
    return [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]


# --- episodes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["class", "url"])
async def test_a_plain_environment_plays_an_episode_and_its_rewards_sum(service, oe, counter_url, where):
    target = OpenEnvClass.load(COUNTER) if where == "class" else OpenEnvServer(counter_url)
    env = OpenEnvEnvironment(target)
    [schema] = env.tool_schemas()
    assert schema["name"] == "step" and list(schema["parameters"]["properties"]) == ["amount"]  # no metadata
    # seed 5 draws target 7 (random.Random(5).randint(3, 9)): two misses, then the hit ends the episode
    traj = await play(service, env, row(step(2), step("two"), step(1), step(4), step(1), {"text": "done"}))
    assert traj.outcome is Outcome.completed, traj.error
    assert traj.messages[1]["content"] == '{"total":0,"target":7}'  # the reset observation
    out = outputs(traj)
    assert out[0] == '{"total":2,"target":7}'
    assert out[1].startswith("error: invalid arguments for step: amount:")
    assert out[3].startswith('{"total":7,"target":7}') and "episode is over" in out[3]
    assert out[4].startswith("error: the episode is over")
    assert traj.reward == pytest.approx(-0.1 - 0.1 + 1.0)
    assert traj.metrics["openenv_steps"] == 3 and traj.metrics["openenv_done"] is True


async def test_reward_final_takes_the_last_observation_and_reset_arguments_come_from_the_row(service):
    env = OpenEnvEnvironment(OpenEnvClass.load(COUNTER), reward="final")
    traj = await play(service, env, row(step(1), step(1), {"text": "ok"}, openenv_reset={"target": 2}))
    assert traj.messages[1]["content"] == '{"total":0,"target":2}'
    assert traj.outcome is Outcome.completed and traj.reward == 1.0


@pytest.mark.parametrize("where", ["class", "url"])
async def test_an_mcp_style_environment_exposes_its_mcp_tools(service, notes_url, where):
    target = OpenEnvClass.load(NOTES) if where == "class" else OpenEnvServer(notes_url)
    env = OpenEnvEnvironment(target)
    assert env.mode == "mcp" and [t["name"] for t in env.tool_schemas()] == ["add_note", "submit", "refuse"]
    # seed 1 draws target 1 (random.Random(1).randint(1, 3))
    task = row(call("add_note", text="x"), call("refuse"), call("add_note"), call("submit"), {"text": "ok"}, seed=1)
    traj = await play(service, env, task)
    assert traj.outcome is Outcome.completed, traj.error
    assert traj.messages[1]["content"] == "write 1 notes, then submit"  # metadata: nothing else to show
    out = outputs(traj)
    assert out[0] == "1 notes" and "the notebook refuses" in out[1]
    assert out[2].startswith("error: invalid arguments for add_note: arguments: 'text' is a required")
    assert out[3].startswith("submitted")
    assert traj.reward == 1.0 and traj.metrics["tool_errors"] == 2


@pytest.mark.parametrize("where", ["class", "url"])
async def test_concurrent_sessions_each_own_their_episode(service, counter_url, where):
    import random

    target = OpenEnvClass.load(COUNTER) if where == "class" else OpenEnvServer(counter_url)
    env = OpenEnvEnvironment(target)
    agent = Agent(
        LocalModelClient(service),
        {env.name: LocalEnvClient(EnvRuntime(env, MemorySessionStore()))},
        AgentSettings(),
        model_name="rollgate-tiny",
    )
    seeds = list(range(10, 18))
    # each episode steps straight to its own seed's target: only an isolated episode is paid 1.0
    tasks = [row(step(random.Random(s).randint(3, 9)), {"text": "ok"}, seed=s, env=env.name) for s in seeds]
    try:
        trajs = await asyncio.gather(*(agent.run(parse_row(t, known_envs=agent.envs)) for t in tasks))
    finally:
        await env.aclose()
    assert [t.outcome for t in trajs] == [Outcome.completed] * len(seeds)
    assert [t.reward for t in trajs] == [1.0] * len(seeds)
    assert env._episodes == {}  # every episode was closed at done


# --- the invariant: only tools reach the environment ---------------------------------------------------
@pytest.mark.parametrize("where", ["class", "url"])
async def test_no_tool_name_reaches_reset_state_close_or_verify(service, oe, counter_url, where):
    target = OpenEnvClass.load(COUNTER) if where == "class" else OpenEnvServer(counter_url)
    env = OpenEnvEnvironment(target)
    runtime = EnvRuntime(env, MemorySessionStore())
    resets, closes = oe.CounterEnvironment.resets, oe.CounterEnvironment.closes
    try:
        seeded = await runtime.seed(row(seed=5))
        assert oe.CounterEnvironment.resets == resets + 1
        for name in RESERVED:
            with pytest.raises(NotFound, match="unknown tool"):
                await runtime.call_tool(seeded.session_id, name, {})
        # nor can arguments smuggle a message type or OpenEnv's framework fields into the action
        for args in ({"amount": 1, "type": "reset"}, {"amount": 1, "metadata": {}}, {"type": "list_tools"}):
            assert (await runtime.call_tool(seeded.session_id, "step", args)).is_error
        assert oe.CounterEnvironment.resets == resets + 1 and oe.CounterEnvironment.closes == closes
        assert (await runtime.state(seeded.session_id))["rewards"] == []  # no step happened either
        # and the model, inventing names, only reads errors
        lax = LaxModelServer(service, list(RESERVED))  # Rollgate's own model server never returns these calls
        traj = await play(lax, OpenEnvEnvironment(target), row(*(call(n) for n in RESERVED), {"text": "x"}))
        assert all(o.startswith("error: unknown tool") for o in outputs(traj))
        assert traj.reward == 0.0 and traj.metrics["openenv_steps"] == 0
    finally:
        await runtime.close(seeded.session_id)
        await env.aclose()


async def test_an_mcp_style_environment_has_no_step_tool(notes_url):
    env = OpenEnvEnvironment(OpenEnvServer(notes_url))
    runtime = EnvRuntime(env, MemorySessionStore())
    try:
        seeded = await runtime.seed(row(seed=1))
        for name in ["step", *RESERVED]:
            with pytest.raises(NotFound):
                await runtime.call_tool(seeded.session_id, name, {})
    finally:
        await env.aclose()


# --- failures: env_error naming the server or class, never a reward, never a hang -----------------------
async def test_an_environment_that_raises_or_hangs_is_env_error_naming_the_class(service):
    traj = await play(service, OpenEnvEnvironment(OpenEnvClass.load(FAULTY)), row(step(1), step(97), {"text": "x"}))
    assert traj.outcome is Outcome.env_error and traj.reward is None
    assert (
        traj.error.component == "openenv" and FAULTY in traj.error.message and "the counter broke" in traj.error.message
    )
    env = OpenEnvEnvironment(OpenEnvClass.load(FAULTY), tool_timeout_s=1.0)
    traj = await play(service, env, row(step(98), {"text": "x"}))
    assert traj.outcome is Outcome.env_error and traj.reward is None and FAULTY in traj.error.message
    assert "within 1s" in traj.error.message and traj.timings.tools_s < 1.0 + 2  # bounded by the tool timeout


async def test_a_server_error_or_timeout_is_env_error_naming_the_url(service, counter_url):
    traj = await play(service, OpenEnvEnvironment(OpenEnvServer(counter_url)), row(step(97), {"text": "x"}))
    assert traj.outcome is Outcome.env_error and traj.reward is None
    assert counter_url in traj.error.message and "EXECUTION_ERROR" in traj.error.message
    env = OpenEnvEnvironment(OpenEnvServer(counter_url), tool_timeout_s=1.0)
    traj = await play(service, env, row(step(98), {"text": "x"}))
    assert traj.outcome is Outcome.env_error and counter_url in traj.error.message and "within 1s" in traj.error.message
    assert traj.timings.tools_s < 1.0 + 2


async def test_a_server_that_stops_mid_episode_is_env_error_naming_its_url(oe):
    with serve_in_thread(oe.counter_app) as url:
        env = OpenEnvEnvironment(OpenEnvServer(url))
        runtime = EnvRuntime(env, MemorySessionStore())
        seeded = await runtime.seed(row(seed=5))
        assert (await runtime.call_tool(seeded.session_id, "step", {"amount": 1})).output.startswith('{"total":1')
    # the server has shut down (it closed the WebSocket on the way)
    with pytest.raises(UpstreamError, match=f"OpenEnv server {url} closed the WebSocket during step"):
        await runtime.call_tool(seeded.session_id, "step", {"amount": 1})
    with pytest.raises(UpstreamError, match="episode is gone"):  # refused, not silently reopened
        await runtime.call_tool(seeded.session_id, "step", {"amount": 1})
    with pytest.raises(UpstreamError, match=f"OpenEnv server {url} cannot be reached"):
        await runtime.seed(row(seed=5))
    await env.aclose()


@pytest.mark.parametrize("sent", ["before", "after"])
async def test_a_server_at_capacity_is_named_as_such_with_the_setting_to_raise(oe, sent):
    """OpenEnv answers a session over its max_concurrent_envs with a CAPACITY_REACHED frame and closes
    the WebSocket at once: whether the reset was sent before or after it closed, that is the error."""
    with serve_in_thread(oe.single_app) as url:
        server = OpenEnvServer(url)
        env = OpenEnvEnvironment(server)
        runtime = EnvRuntime(env, MemorySessionStore())
        await runtime.seed(row(seed=5))  # holds the server's one session
        second = await server.open()
        if sent == "after":
            await asyncio.sleep(0.5)  # the server has refused the session and closed the socket
        with pytest.raises(UpstreamError) as caught:
            await second.reset({}, 5.0)
        message = str(caught.value)
        assert f"OpenEnv server {url} at capacity (CAPACITY_REACHED): Server at capacity: 1/1" in message
        assert "max_concurrent_envs" in message and "SUPPORTS_CONCURRENT_SESSIONS" in message
        await env.aclose()


def test_start_up_names_an_unreachable_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UpstreamError, match=f"OpenEnv server {url} cannot be reached"):
        OpenEnvEnvironment(OpenEnvServer(url, connect_timeout_s=3))


RESET = json.dumps({"type": "observation", "data": {"observation": {"text": "hi"}, "reward": None, "done": False}})
SCHEMA = {"action": {"type": "object", "properties": {"move": {"type": "string"}}, "required": ["move"]}}


@contextlib.contextmanager
def fake_server(step_reply: str | None, schema: object = SCHEMA):
    """A fake OpenEnv server (a real one never sends these frames): /schema, and /ws answering
    reset properly and step with `step_reply` (None: never answers)."""
    from websockets.asyncio.server import serve

    started, stop = threading.Event(), None
    box: dict = {}

    async def handler(ws):
        async for raw in ws:
            kind = json.loads(raw)["type"]
            if kind == "reset":
                await ws.send(RESET)
            elif kind == "step" and step_reply is not None:
                await ws.send(step_reply)

    def http(conn, request):
        if request.path == "/schema":
            return conn.respond(HTTPStatus.OK, json.dumps(schema))
        return None

    async def main():
        nonlocal stop
        stop = asyncio.Event()
        async with serve(handler, "127.0.0.1", 0, process_request=http) as server:
            box["url"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            started.set()
            await stop.wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield box["url"]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("not json {", "is not an OpenEnv observation"),
        (json.dumps({"type": "observation", "data": {"observation": "text"}}), "is not an OpenEnv observation"),
        (json.dumps({"type": "surprise", "data": {}}), "is not an OpenEnv observation"),
        (json.dumps({"type": "observation", "data": {"observation": {}, "reward": "high"}}), "reward 'high'"),
        (None, "did not answer step within 1s"),
    ],
)
async def test_malformed_frames_are_env_error_within_the_tool_timeout(service, reply, message):
    with fake_server(reply) as url:
        env = OpenEnvEnvironment(OpenEnvServer(url), tool_timeout_s=1.0)
        traj = await play(service, env, {**row(call("step", move="up"), {"text": "x"})})
    assert traj.outcome is Outcome.env_error and traj.reward is None
    assert traj.error.component == "openenv" and url in traj.error.message and message in traj.error.message
    assert traj.timings.tools_s < 1.0 + 2


def test_a_schema_that_is_not_an_action_schema_fails_start_up_naming_the_url():
    with fake_server(RESET, schema={"action": "move"}) as url, pytest.raises(ProtocolError) as info:
        OpenEnvEnvironment(OpenEnvServer(url))
    assert info.value.message.startswith(f"OpenEnv server {url} answered GET /schema without an action")


# --- configuration -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "envs[0] (e): give exactly one of env_class"),
        ({"env_class": COUNTER, "url": "http://127.0.0.1:1"}, "envs[0] (e): give exactly one of env_class"),
        ({"env_class": "counter.py"}, 'envs[0] (e).env_class: expected "module:Class"'),
        ({"url": "127.0.0.1:8000"}, "envs[0] (e).url: expected an http(s):// or ws(s):// URL"),
        ({"url": "http://h:1", "reward": "mean"}, "envs[0] (e).reward:"),
        ({"url": "http://h:1", "tool_timeout_s": 0}, "envs[0] (e).tool_timeout_s:"),
        ({"url": "http://h:1", "env_kwargs": {"a": 1}}, "envs[0] (e): action_class and env_kwargs apply to env_class"),
        ({"url": "http://h:1", "urls": ["http://h:1"]}, "envs[0] (e).urls: Extra inputs are not permitted"),
    ],
)
def test_configuration_errors_name_the_entry_and_field(options, message):
    with pytest.raises(BadRequest) as info:
        spec_from_config({"name": "e", **options}, "envs[0] (e)")
    assert info.value.message.startswith(message), info.value.message


def test_a_class_that_cannot_be_loaded_fails_its_build_naming_the_entry(oe):
    spec = spec_from_config({"name": "e", "env_class": "tests.interop.openenv_envs:Nope"}, "envs[2] (e)")
    with pytest.raises(BadRequest) as info:
        spec.build()
    assert info.value.message.startswith("envs[2] (e).env_class: cannot import 'tests.interop.openenv_envs:Nope'")
    spec = spec_from_config({"name": "e", "env_class": "tests.interop.openenv_envs:CounterAction"}, "envs[2] (e)")
    with pytest.raises(BadRequest, match="is not an OpenEnv Environment subclass"):
        spec.build()


@pytest.mark.parametrize("where", ["class", "url"])
async def test_settings_entries_run_through_the_local_stack(tiny_model_dir, counter_url, where):
    entry = {"name": f"oe_{where}", "kind": "openenv", "reward": "final"}
    entry.update({"env_class": COUNTER} if where == "class" else {"url": counter_url})
    settings = Settings(envs=[entry], model={"backend": "scripted", "model_path": tiny_model_dir})
    stack = local_stack(settings)
    try:
        task = {**row(step(3), step(4), {"text": "7"}), "env": entry["name"]}
        traj = await stack.agent.run(parse_row(task, known_envs=stack.agent.envs))
    finally:
        await stack.aclose()
    assert traj.outcome is Outcome.completed, traj.error
    assert traj.task.env == entry["name"] and traj.reward == 1.0
