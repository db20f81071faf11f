"""The reasoning_gym and textarena families: splits that never overlap, deterministic generation,
bad input named by field, library failures as env errors, replayed games, lazy imports."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys

import httpx
import pytest

from rollgate.core.app import make_app
from rollgate.core.errors import BadRequest, NotFound
from rollgate.core.rows import parse_row
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import ModelSettings, Settings
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.families import reasoning_gym as rg
from rollgate.resources_servers.families import textarena as ta
from rollgate.resources_servers.families.common import INSTALL_HINT, Library, input_text
from rollgate.resources_servers.families.splits import SPLITS, split_of
from rollgate.resources_servers.lazy_routes import envs_router
from rollgate.resources_servers.registry import default_registry, load_env

# A config with few distinct questions (single digits, two terms): duplicates across indices and
# seeds are certain, which is what the split must survive.
TINY_CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def runtime(name: str) -> EnvRuntime:
    return EnvRuntime(load_env(name), MemorySessionStore())


def seed(rt: EnvRuntime, row: dict):
    return asyncio.run(rt.seed(row))


@pytest.mark.parametrize(
    ("env", "config", "n"),
    [
        ("reasoning_gym/chain_sum", TINY_CHAIN_SUM, 25),
        ("reasoning_gym/spell_backward", None, 20),
        ("textarena/Sudoku", None, 5),
        ("textarena/Mastermind", None, 10),
        ("math", None, 20),
        ("game2048", None, 6),
    ],
)
def test_train_and_eval_never_share_a_task(env, config, n):
    spec = default_registry().get(env)
    by_split = {s: [spec.tasks(n, seed_, config, s) for seed_ in (0, 1)] for s in SPLITS}
    prompts = {s: {input_text(parse_row(r).row) for rows in by_split[s] for r in rows} for s in SPLITS}
    for s in SPLITS:
        for rows in by_split[s]:
            assert len(rows) == n and all(r["split"] == s for r in rows)
    if env.startswith("reasoning_gym/") or env == "math" or env == "textarena/Sudoku":
        # the content a model sees decides the split: never the same prompt on both sides
        assert not prompts["train"] & prompts["eval"]
    # and across seeds the same content falls on the same side
    assert len({r["task_id"] for rows in by_split["train"] for r in rows}) == 2 * n


def test_split_is_a_function_of_content_only():
    keys = [f"reasoning_gym/chain_sum|What is {i} + {i}?" for i in range(200)]
    assert [split_of(k) for k in keys] == [split_of(k) for k in keys]
    assert 60 < sum(split_of(k) == "eval" for k in keys) < 140  # about half each


def test_generation_is_deterministic_for_the_seed():
    spec = default_registry().get("reasoning_gym/basic_arithmetic")
    assert spec.tasks(5, 3, None, "train") == spec.tasks(5, 3, None, "train")
    assert spec.tasks(5, 3, None, "train") != spec.tasks(5, 4, None, "train")
    game = default_registry().get("textarena/LightsOut")
    assert game.tasks(3, 9, None, "eval") == game.tasks(3, 9, None, "eval")


def test_a_fixed_game_has_one_task_and_says_so():
    spec = default_registry().get("textarena/TowerOfHanoi")
    found = [s for s in SPLITS if _try(spec, s)]
    assert len(found) == 1
    with pytest.raises(BadRequest, match="only 1 distinct") as err:
        spec.tasks(2, 0, None, found[0])
    assert err.value.field == "n"


def _try(spec, split):
    try:
        return spec.tasks(1, 0, None, split)
    except BadRequest:
        return None


def test_a_generated_row_reseeds_to_the_same_question_and_no_answer_is_in_it():
    row = default_registry().get("reasoning_gym/chain_sum").tasks(1, 5, None, "train")[0]
    rt = runtime("reasoning_gym/chain_sum")
    seeded = seed(rt, row)
    assert seeded.observation is None  # the question is already in the row's input
    state = rg.RGState.model_validate(asyncio.run(rt.state(seeded.session_id)))
    assert "answer" not in row and rt.env.reference_answer(state) not in str(row["responses_create_params"])
    minimal = {k: v for k, v in row.items() if k != "responses_create_params"} | {
        "responses_create_params": {"input": []}
    }
    assert input_text(parse_row(row).row).split("\n")[0] in seed(rt, minimal).observation


@pytest.mark.parametrize(
    ("env", "fields", "field"),
    [
        ("reasoning_gym/chain_sum", {"config": {"min_terms": 2, "bogus": 1}}, "config.bogus"),
        ("reasoning_gym/chain_sum", {"config": {"min_terms": 5, "max_terms": 2}}, "config"),
        ("reasoning_gym/chain_sum", {"config": "min_terms=2"}, "config"),
        ("reasoning_gym/chain_sum", {"dataset": "gcd"}, "dataset"),
        ("reasoning_gym/chain_sum", {"index": 10_000, "config": {"size": 10}}, "index"),
        ("reasoning_gym/chain_sum", {"entry": {"question": "1+1?"}}, "entry"),
        ("textarena/Sudoku", {"game_id": "Chess-v0"}, "game_id"),
    ],
)
def test_bad_rows_are_refused_naming_the_field(env, fields, field):
    with pytest.raises(BadRequest) as err:
        seed(runtime(env), {"responses_create_params": {"input": []}, "seed": 1, **fields})
    assert err.value.field == field and err.value.status == 400


def test_a_row_whose_prompt_is_not_the_generated_one_is_refused():
    row = default_registry().get("reasoning_gym/chain_sum").tasks(1, 0, None, "train")[0]
    row["responses_create_params"]["input"][0]["content"] = "What is 2 + 2?"
    with pytest.raises(BadRequest) as err:
        seed(runtime("reasoning_gym/chain_sum"), row)
    assert err.value.field == "responses_create_params.input"


def test_unknown_environment_dataset_and_game_name_the_field_and_suggest():
    for name, hint in [
        ("reasoning_gym/chain_sun", "reasoning_gym/chain_sum"),
        ("textarena/Sudoko", "textarena/Sudoku"),
    ]:
        with pytest.raises(NotFound) as err:
            load_env(name)
        assert err.value.field == "env" and hint in err.value.message
    with pytest.raises(BadRequest) as err:
        default_registry().resolve(["nethack/*"])
    assert err.value.field == "envs"


def test_rollgate_tasks_reports_a_bad_config_naming_the_field(tmp_path, capsys):
    from rollgate.cli import main

    out = tmp_path / "t.jsonl"
    assert (
        main(["tasks", "reasoning_gym/gcd", "--n", "2", "--seed", "0", "--out", str(out), "--config", '{"nope": 1}'])
        == 2
    )
    assert "config.nope" in capsys.readouterr().err and not out.exists()
    assert (
        main(["tasks", "textarena/Sudoku", "--n", "2", "--seed", "0", "--out", str(out), "--config", "{bad json"]) == 2
    )


async def test_a_scorer_that_raises_on_a_well_formed_reply_ends_the_episode_as_env_error(tmp_path):
    from rollgate.stack.parts import local_stack

    env = "reasoning_gym/boxnet"
    settings = Settings(home=str(tmp_path), envs=[env], model=ModelSettings(backend="scripted"))
    stack = local_stack(settings)
    # a well-formed reply (an empty list of moves) on a grid without boxes: the scorer divides by
    # the number of boxes, 0; a scorer failing on a reply of the shape it asks for stays an error
    script = json.dumps([{"text": "<answer>[]</answer>"}])
    row = {
        "env": env,
        "responses_create_params": {"input": [], "metadata": {"rollgate_script": script}},
        "entry": {"question": "Move the boxes.", "answer": "[]", "metadata": {"initial_state": {"0.5_0.5": []}}},
    }
    try:
        traj = await stack.agent.run(parse_row(row))
    finally:
        await stack.aclose()
    assert traj.outcome.value == "env_error" and traj.reward is None
    assert env in traj.error.message and "ZeroDivisionError" in traj.error.message


async def _verify_reply(env: str, reply: str) -> tuple[float, dict, str]:
    rt = EnvRuntime(load_env(env), MemorySessionStore())
    row = default_registry().get(env).tasks(1, 0, None, "train")[0]
    sid = (await rt.seed(row)).session_id
    truth = load_env(env).reference_answer(rg.RGState(**await rt.state(sid)))
    result = await rt.verify(sid, {"response": f"<answer>{reply}</answer>"})
    return result.reward, result.metrics, truth


@pytest.mark.parametrize(
    "reply,reward,malformed",
    [
        ("I don't know.", 0.0, True),  # the scorer raised ValueError (int("I don't know.")): env_error
        ("2 × three", 0.0, True),
        ("", 0.01, False),  # no factor: the scorer's own grade of a wrong answer
        ("1", 0.01, False),
        (None, 1.0, False),  # the gold answer
    ],
)
async def test_prime_factorization_grades_a_malformed_reply_0_not_an_env_error(reply, reward, malformed):
    env = "reasoning_gym/prime_factorization"
    if reply is None:
        _, _, reply = await _verify_reply(env, "1")
    got, metrics, _ = await _verify_reply(env, reply)
    assert got == reward
    assert ("malformed_answer" in metrics) == malformed


@pytest.mark.parametrize(
    "reply,reward,malformed",
    [
        ("42", 0.0, True),  # JSON, not a list: the scorer raised TypeError ('int' object is not iterable)
        ('{"Agent[0.5, 0.5]": "move(box_red, target_red)"}', 0.0, True),  # an object: AttributeError
        ('[{"Agent[0.5, 0.5]": 3}]', 0.0, True),  # a move that is not a string: TypeError in re.match
        ("I don't know.", 0.0, False),  # not JSON: the scorer's own 0.0
        ("[]", 0.05, False),  # well-formed, no move: the scorer's own minimum
    ],
)
async def test_boxnet_grades_a_malformed_reply_0_not_an_env_error(reply, reward, malformed):
    got, metrics, _ = await _verify_reply("reasoning_gym/boxnet", reply)
    assert got == reward
    assert ("malformed_answer" in metrics) == malformed


@pytest.mark.parametrize(
    "reply,reward,malformed",
    [
        (" \n\t ", 0.0, True),  # blank: the scorer paid 0.05, its credit for valid moves
        ("", 0.0, True),  # the scorer's own 0.0 for an empty answer
        ("Move disk 1 from Peg 1 to Peg 2", 0.05, False),  # a valid move that does not solve it
    ],
)
async def test_tower_of_hanoi_pays_a_blank_answer_nothing(reply, reward, malformed):
    got, metrics, _ = await _verify_reply("reasoning_gym/tower_of_hanoi", reply)
    assert got == reward
    assert ("malformed_answer" in metrics) == malformed


def test_the_shape_checks_accept_what_the_scorers_parse():
    assert rg.ANSWER_SHAPES["prime_factorization"]("2 × 3 × 3") is None
    assert rg.ANSWER_SHAPES["boxnet"]('[{"Agent[0.5, 0.5]": "move(box_red, square[0.5, 1.5])"}]') is None


def test_textarena_replay_matches_the_live_game_and_leaves_global_random_alone():
    moves = ["[Up]", "[Left]", "[Down]", "[Right]", "[Up]", "[Left]"]
    random.seed(12345)
    before = random.getstate()
    live = ta.Games()
    live.start("2048-v0", 77)
    live_steps = [live.play("2048-v0", 77, moves[: i + 1]) for i in range(len(moves))]
    assert random.getstate() == before  # textarena's reset reseeds `random`: not the process's
    for i in range(len(moves)):  # fresh engines (no cached position): a replay from the seed
        random.random()  # whatever the process does with `random` meanwhile
        assert ta.Games().play("2048-v0", 77, moves[: i + 1]) == live_steps[i]


def test_textarena_games_with_swapped_reward_arguments_still_give_a_number():
    rt = runtime("textarena/Countdown")
    sid = seed(rt, {"responses_create_params": {"input": []}, "seed": 3}).session_id
    asyncio.run(rt.call_tool(sid, "act", {"action": "not a move"}))  # one warning, then the game ends
    out = asyncio.run(rt.call_tool(sid, "act", {"action": "still not a move"}))
    assert "Game over" in out.output
    result = asyncio.run(rt.verify(sid, {"response": "done"}))
    assert isinstance(result.reward, float) and result.metrics["finished"]


def test_listing_imports_no_family_library():
    code = (
        "import sys; from rollgate.resources_servers.registry import default_registry;"
        "r = default_registry(); assert len(r.names()) >= 110, r.names();"
        "print('reasoning_gym' in sys.modules, 'textarena' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_the_dataset_catalog_matches_the_installed_reasoning_gym():
    names, source = rg.dataset_names()
    assert source == "catalog", (
        "reasoning-gym was upgraded: python -m rollgate.resources_servers.families.reasoning_gym"
    )
    assert names == sorted(rg._registered())


def test_without_the_library_the_family_is_listed_unavailable_with_the_install_hint(monkeypatch):
    # the libraries are installed here: point the families at import names that are not
    monkeypatch.setattr(rg, "LIB", Library("no_such_reasoning_lib", "reasoning-gym"))
    monkeypatch.setattr(ta, "LIB", Library("no_such_textarena_lib", "textarena"))
    specs = rg.environments() + ta.environments()
    assert len(specs) == 174 and not any(s.available for s in specs)  # 106 + 21 one-player + 42 two- + 5 multi-player
    assert all(INSTALL_HINT in s.reason for s in specs if not s.name.endswith("/composite"))


async def test_many_environments_are_served_under_envs_with_routes_built_on_first_use():
    names = ["reasoning_gym/chain_sum", "textarena/2048", "math"]
    runtimes = {n: runtime(n) for n in names}
    app = make_app("test", component="test")
    router = envs_router(runtimes)
    app.include_router(router)
    lazy = router.routes[0].app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert (await c.get("/envs/reasoning_gym/chain_sum/tools")).json()[0]["name"] == "submit_answer"
        assert list(lazy._routers) == ["reasoning_gym/chain_sum"]  # only what was asked for was built
        seeded = await c.post(
            "/envs/textarena/2048/sessions", json={"responses_create_params": {"input": []}, "seed": 1}
        )
        sid = seeded.json()["session_id"]
        moved = await c.post(f"/envs/textarena/2048/sessions/{sid}/tools/act", json={"arguments": {"action": "Up"}})
        assert moved.status_code == 200 and "Score" in moved.json()["output"]
        bad = await c.post("/envs/math/sessions", json={"responses_create_params": {}})
        assert bad.status_code == 400
        missing = await c.get("/envs/nethack/tools")
        assert missing.status_code == 404 and missing.json()["error"]["field"] == "env"


def test_rollgate_tasks_requires_a_seed_as_eval_does(tmp_path, capsys):
    from rollgate.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["tasks", "math", "--n", "2", "--out", str(tmp_path / "t.jsonl")])
    assert exit_.value.code == 2 and "--seed" in capsys.readouterr().err


def test_a_split_with_no_tasks_points_at_the_other_split(tmp_path, capsys):
    from rollgate.cli import main

    # Every starting position of TowerOfHanoi's default config hashes into the eval split.
    args = ["tasks", "textarena/TowerOfHanoi", "--n", "1", "--seed", "0", "--out", str(tmp_path / "t.jsonl")]
    assert main(args) == 2
    assert "--split eval has" in capsys.readouterr().err
    assert main([*args, "--split", "eval"]) == 0


@pytest.mark.parametrize("reply,reward", [("I don't know.", 0.0), ("False", None), ("True", None), ("", 0.0)])
async def test_game_of_life_halting_pays_only_the_right_word(reply, reward):
    # reasoning-gym's scorer compared bool(answer) == bool(entry["answer"]): any reply earned 1.0
    env = "reasoning_gym/game_of_life_halting"
    rt = EnvRuntime(load_env(env), MemorySessionStore())
    row = default_registry().get(env).tasks(1, 0, None, "train")[0]
    sid = (await rt.seed(row)).session_id
    truth = load_env(env).reference_answer(rg.RGState(**await rt.state(sid)))
    got = (await rt.verify(sid, {"response": f"<answer>{reply}</answer>"})).reward
    assert got == (reward if reward is not None else float(reply == truth))
