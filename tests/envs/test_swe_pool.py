"""The swe family's warm pool (sandboxes made ahead with the pristine checkout): a pooled session
gets the task's buggy tree (the mutation applied, the targets hidden) and nothing another session
did; the pool refills, stays bounded, serves several event loops at once, and is drained on close.
Real sandboxes (bubblewrap) and the real `parse` project, like test_swe_env.py."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.families.swe import checkout, trees
from rollgate.resources_servers.families.swe.env import SweEnv
from rollgate.resources_servers.server import make_runtime
from tests.envs import test_swe_env
from tests.envs.test_swe_env import FAST, _registry, gold_calls, play

# the same session fixtures as test_swe_env.py (the validated `parse` tasks, Rollgate's home)
swe_home = test_swe_env.swe_home
parse_rows = test_swe_env.parse_rows


@pytest.fixture
async def pooled(swe_home):
    env = SweEnv(FAST, home=swe_home, warm_pool=2)
    yield env
    await env.aclose()


async def _tree_of(env: SweEnv, sid_state) -> dict[str, bytes]:
    box = env._box(sid_state)
    listed = await box.exec(["find", ".", "-type", "f", "-not", "-path", "*/__pycache__/*"])
    return {p.removeprefix("./"): await box.read_file(p.removeprefix("./")) for p in listed.stdout.split()}


async def test_a_pooled_session_gets_the_buggy_tree_and_nothing_of_the_session_before(pooled, parse_rows):
    row = parse_rows[0]
    rt = EnvRuntime(pooled, MemorySessionStore())
    await pooled.pool.wait_full()
    assert pooled.pool.idle == 2
    bug, vis = pooled._trees(checkout.Mutation.model_validate(row["mutation"]), row["target_tests"])
    assert bug != vis != pooled._pristine()  # the mutation changed a module, the targets a test file

    first = await rt.seed(row)
    state = pooled.State.model_validate(await rt.state(first.session_id))
    assert pooled.pool.hits == 1 and await _tree_of(pooled, state) == vis
    first_box = pooled._box(state)
    mutated = row["mutation"]["path"]
    await rt.call_tool(first.session_id, "write_file", {"path": "leak.txt", "content": "secret"})
    await rt.call_tool(first.session_id, "shell", {"command": f"echo 'LEAK = 1' >> {mutated} && rm -r tests"})
    await rt.close(first.session_id)

    await pooled.pool.wait_full()  # refilled after the take
    second = await rt.seed(row)
    state = pooled.State.model_validate(await rt.state(second.session_id))
    assert pooled.pool.hits == 2 and pooled._box(state).id != first_box.id
    assert await _tree_of(pooled, state) == vis  # no leak.txt, the module and the tests as the task has them
    await rt.close(second.session_id)


async def test_pooled_episodes_score_like_fresh_ones(pooled, parse_rows):
    rt = EnvRuntime(pooled, MemorySessionStore())
    await pooled.pool.wait_full()
    for row in parse_rows:
        gold, _ = await play(rt, row, gold_calls(row))
        assert gold.reward == 1.0, gold
    noop, _ = await play(rt, parse_rows[0])
    assert noop.reward == 0.0
    assert pooled.pool.hits >= 2  # the verifier's sandboxes come from the pool too


async def test_morph_writes_what_differs_and_removes_what_is_gone(pooled):
    box = await pooled.sandboxes.create()
    try:
        have = {"a.py": b"a = 1\n", "pkg/b.py": b"b = 1\n", "pkg/c.py": b"c = 1\n"}
        await trees.write_tree(box, have)
        want = {"a.py": b"a = 1\n", "pkg/b.py": b"b = 2\n", "pkg/d/e.py": b"e = 1\n"}
        assert await trees.morph(box, have, want) == 3
        listed = await box.exec(["find", ".", "-type", "f"])
        assert sorted(p.removeprefix("./") for p in listed.stdout.split()) == sorted(want)
        assert await box.read_file("pkg/b.py") == b"b = 2\n"
        changes, problem = await trees.changes(box, have)
        assert problem is None and changes == {"pkg/b.py": b"b = 2\n", "pkg/d/e.py": b"e = 1\n", "pkg/c.py": None}
    finally:
        await box.destroy()


async def test_the_pool_is_bounded_serves_several_loops_and_is_drained_on_close(swe_home, parse_rows):
    env = SweEnv(FAST, home=swe_home, warm_pool=2)
    await env.pool.wait_full()
    # takes from four threads, each with an event loop of its own, two at a time
    with ThreadPoolExecutor(2) as ex:
        boxes = list(ex.map(lambda _: asyncio.run(env.pool.take()), range(4)))
    taken = [b for b in boxes if b is not None]
    assert env.pool.hits + env.pool.misses == 4 and env.pool.hits == len(taken) >= 2
    assert len({b.id for b in taken}) == len(taken)  # never the same sandbox twice
    await env.pool.wait_full()
    await asyncio.sleep(0.2)
    assert env.pool.idle == 2 and env.pool._making == 0  # topped up to its size, no more
    idle_dirs = [b.workdir for b in env.pool._idle]
    await env.aclose()
    assert env.pool.idle == 0 and not any(os.path.exists(d) for d in idle_dirs)
    assert env.pool._thread is not None and not env.pool._thread.is_alive()
    assert await env.pool.take() is None and env.pool.idle == 0  # closed: no refill
    for b in taken:
        await b.destroy()


def test_the_pool_is_on_by_default_and_a_setting_turns_it_off(swe_home):
    registry = _registry()
    runtime = make_runtime(Settings(), f"swe/{FAST}", registry=registry)
    assert runtime.env.pool is not None and runtime.env.pool.size == 2
    off = make_runtime(Settings(swe={"warm_pool": 0}), f"swe/{FAST}", registry=registry)
    assert off.env.pool is None
    with pytest.raises(ValueError, match="warm_pool"):
        Settings(swe={"warm_pool": -1})
