"""Multi-role episodes in the agent (rollgate.agent_server.roles): one trajectory per role, each
token-exact for its own role, linked by episode and group id; rewards per role (a zero-sum game's
add up to 0); an infrastructure failure of one role ends the episode for every role with a typed
error and no reward.

The policies are the model server's `scripted` backend with the tiny model's real tokenizer (a
script per role, sent as that role's metadata) and, for two different policies, a second
scripted model server on loopback reached over HTTP; the environments are real (textarena's
TicTacToe, the solve_grade example) over real HTTP."""

from __future__ import annotations

import contextlib
import json
from itertools import pairwise

import pytest

from rollgate.agent_server.agent import Agent, RunContext
from rollgate.agent_server.roles import RolesRunner
from rollgate.core.errors import BadRequest
from rollgate.core.rows import parse_row
from rollgate.core.schemas import Outcome, RolePolicy, Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import AgentSettings, Settings
from rollgate.model_server.app import create_model_app
from rollgate.model_server.client import HttpModelClient, LocalModelClient
from rollgate.model_server.server import build_service
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import HttpEnvClient
from rollgate.resources_servers.envs.solve_grade import SolveGradeEnv
from rollgate.resources_servers.registry import load_env
from tests.conftest import free_port

pytest.importorskip("textarena")

TTT = "textarena/TicTacToe"


def moves(*cells: int, then: str = "done") -> dict[str, str]:
    """A scripted role: one `act` per turn, then a text reply."""
    turns = [{"call": {"name": "act", "arguments": {"action": f"[{c}]"}}} for c in cells] + [{"text": then}]
    return {"rollgate_script": json.dumps(turns)}


def scripted(name: str, tiny_model_dir: str):
    return build_service(Settings(model={"backend": "scripted", "model_path": tiny_model_dir, "served_name": name}))


@pytest.fixture(scope="module")
def env_urls():
    apps = {
        TTT: create_resources_app(EnvRuntime(load_env(TTT), MemorySessionStore())),
        "solve_grade": create_resources_app(EnvRuntime(SolveGradeEnv(), MemorySessionStore())),
        "math": create_resources_app(EnvRuntime(load_env("math"), MemorySessionStore())),
    }
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(serve_in_thread(app, timeout_s=60)) for name, app in apps.items()}


@pytest.fixture(scope="module")
def other_model_url(tiny_model_dir):
    """A second policy: another model server (scripted, another name) on loopback."""
    with serve_in_thread(create_model_app(scripted("other-policy", tiny_model_dir)), timeout_s=60) as url:
        yield url


@pytest.fixture
async def runner(tiny_model_dir, env_urls):
    """RolesRunner factory: the loop's own model in process, the environments over HTTP."""
    made: list[RolesRunner] = []

    def make(models=None, **settings) -> RolesRunner:
        envs = {name: HttpEnvClient(name, url) for name, url in env_urls.items()}
        own = LocalModelClient(scripted("rollgate-tiny", tiny_model_dir))
        agent = Agent(own, envs, AgentSettings(**settings), model_name="rollgate-tiny")
        made.append(RolesRunner(agent, models or {}))
        return made[-1]

    yield make
    for r in made:
        for client in {**r.base.envs, **{n: m for n, m in r.models.items() if n != r.base.model_name}}.values():
            await client.aclose()


def task(env: str = TTT, **fields):
    row = {"responses_create_params": {"input": "Play well."}, "env": env, "seed": 7, **fields}
    return parse_row(row, row_index=0)


def assert_token_exact(traj: Trajectory) -> None:
    assert traj.turns and traj.metrics["token_drift"] == 0
    for prev, cur in pairwise(traj.turns):
        done = prev.prompt_token_ids + prev.generation_token_ids
        assert cur.prompt_token_ids[: len(done)] == done


async def test_self_play_yields_one_token_exact_trajectory_per_role_with_zero_sum_rewards(runner):
    r = runner()
    policies = {
        "player_0": RolePolicy(metadata=moves(0, 1, 2), policy_version="v1"),
        "player_1": RolePolicy(metadata=moves(3, 4), policy_version="v1"),
    }
    record = await r.run(task(), RunContext(job_id="job_x", group_id="grp_x"), policies)
    assert record.outcome is Outcome.completed
    by_role = {t.role: t for t in record.trajectories}
    assert sorted(by_role) == ["player_0", "player_1"]
    assert {t.episode_id for t in record.trajectories} == {record.episode_id}
    assert {t.group_id for t in record.trajectories} == {"grp_x"}
    assert by_role["player_0"].reward == 1.0 and by_role["player_1"].reward == -1.0
    assert sum(t.reward for t in record.trajectories) == 0
    for t in record.trajectories:
        assert_token_exact(t)
        assert t.policy.model == "rollgate-tiny" and t.policy.policy_version == "v1"
        Trajectory.model_validate_json(t.model_dump_json())  # each is an ordinary trajectory
    # each role's transcript holds its own moves and what it was told, never the other's calls
    calls = [m["arguments"] for m in by_role["player_1"].messages if m.get("type") == "function_call"]
    assert [json.loads(a)["action"] for a in calls] == ["[3]", "[4]"]
    assert by_role["player_0"].metrics["tool_calls"] == 3 and by_role["player_1"].metrics["tool_calls"] == 2
    # player_1's prompts carry no token of player_0's generations: two separate sequences
    assert by_role["player_0"].turns[0].prompt_token_ids != by_role["player_1"].turns[0].prompt_token_ids


async def test_a_draw_gives_both_roles_zero(runner):
    r = runner()
    policies = {
        "player_0": RolePolicy(metadata=moves(0, 2, 5, 6, 7)),
        "player_1": RolePolicy(metadata=moves(1, 3, 4, 8)),
    }
    record = await r.run(task(), RunContext(), policies)
    assert record.outcome is Outcome.completed
    assert [t.reward for t in record.trajectories] == [0.0, 0.0]
    assert all(t.metrics["finished"] for t in record.trajectories)


async def test_two_different_policies_each_recorded_with_its_own_model(runner, other_model_url):
    r = runner(models={"other-policy": HttpModelClient(other_model_url)})
    policies = {
        "player_0": RolePolicy(metadata=moves(4, 0, 8), sampling={"temperature": 0.0}),
        "player_1": RolePolicy(model="other-policy", metadata=moves(2, 6), sampling={"temperature": 0.7}),
    }
    record = await r.run(task(), RunContext(), policies)
    by_role = {t.role: t for t in record.trajectories}
    assert (
        by_role["player_0"].policy.model == "rollgate-tiny" and by_role["player_0"].policy.sampling["temperature"] == 0
    )
    assert (
        by_role["player_1"].policy.model == "other-policy" and by_role["player_1"].policy.sampling["temperature"] == 0.7
    )
    assert by_role["player_0"].reward == 1.0 and by_role["player_1"].reward == -1.0
    for t in record.trajectories:
        assert_token_exact(t)


async def test_a_second_move_in_one_turn_is_refused_and_a_text_reply_keeps_the_turn(runner):
    r = runner(max_turns=3)
    # player_0 calls act twice at once: the first call moves, the second is out of turn
    call = '<tool_call>{{"name": "act", "arguments": {{"action": "[{}]"}}}}</tool_call>'
    double = [{"text": call.format(0) + call.format(1)}, {"text": "done"}]
    policies = {
        "player_0": RolePolicy(metadata={"rollgate_script": json.dumps(double)}),
        "player_1": RolePolicy(metadata=moves()),  # answers in text every time: nudged, never moves
    }
    record = await r.run(task(), RunContext(), policies)
    by_role = {t.role: t for t in record.trajectories}
    outputs = [m["output"] for m in by_role["player_0"].messages if m.get("type") == "function_call_output"]
    assert len(outputs) == 2 and outputs[0].startswith("Move made")
    assert "'player_0' acted out of turn" in outputs[1] and "'player_1'" in outputs[1]
    assert by_role["player_0"].metrics["tool_errors"] == 1
    p1 = [str(m.get("content")) for m in by_role["player_1"].messages if m.get("role") == "user"]
    assert sum("It is your turn (player_1)" in text for text in p1) == 3
    # player_1's turn budget ran out: the unfinished game is a draw, still zero-sum
    assert record.outcome is Outcome.truncated
    assert [t.reward for t in record.trajectories] == [0.0, 0.0]
    assert by_role["player_1"].metrics["turns"] == 3


async def test_solver_and_grader_each_get_the_reward_the_environment_defines(runner):
    r = runner()
    solver = [{"call": {"name": "submit", "arguments": {"answer": "12"}}}, {"text": "done"}]
    grader = [{"call": {"name": "grade", "arguments": {"correct": True}}}, {"text": "done"}]
    policies = {
        "solver": RolePolicy(metadata={"rollgate_script": json.dumps(solver)}),
        "grader": RolePolicy(metadata={"rollgate_script": json.dumps(grader)}, instructions="You are a strict grader."),
    }
    record = await r.run(task("solve_grade", question="3 * 4?", answer=12), RunContext(), policies)
    by_role = {t.role: t for t in record.trajectories}
    assert by_role["solver"].reward == 1.0 and by_role["grader"].reward == 1.0  # not zero-sum: both can win
    grader_saw = " ".join(str(m.get("content")) for m in by_role["grader"].messages if m.get("role") == "user")
    assert "Proposed answer: 12" in grader_saw
    wrong_answer = [{"call": {"name": "submit", "arguments": {"answer": "13"}}}, {"text": "done"}]
    wrong = {**policies, "solver": RolePolicy(metadata={"rollgate_script": json.dumps(wrong_answer)})}
    record = await r.run(task("solve_grade", question="3 * 4?", answer=12), RunContext(), wrong)
    assert {t.role: t.reward for t in record.trajectories} == {"solver": 0.0, "grader": 0.0}


async def test_an_infrastructure_failure_of_one_role_ends_the_episode_for_all_without_reward(runner):
    dead = HttpModelClient(f"http://127.0.0.1:{free_port()}", timeout_s=2.0)  # nothing listens there
    r = runner(models={"dead": dead}, retries=1)
    policies = {"player_0": RolePolicy(metadata=moves(0, 1, 2)), "player_1": RolePolicy(model="dead")}
    record = await r.run(task(), RunContext(), policies)
    assert record.outcome is Outcome.model_error
    assert len(record.trajectories) == 2
    for t in record.trajectories:
        assert t.outcome is Outcome.model_error and t.reward is None  # never a win or a loss
        assert t.error is not None and t.error.message.startswith("role player_1:")


async def test_bad_role_mappings_are_refused_naming_the_role_and_what_is_accepted(runner):
    r = runner()
    cases = [
        ({"player_0": RolePolicy(), "referee": RolePolicy()}, "roles.referee", "player_0, player_1"),
        ({"player_0": RolePolicy()}, "roles.player_1", "player_0, player_1"),
        ({"player_0": RolePolicy(model="gpt-9"), "player_1": RolePolicy()}, "roles.player_0.model", "rollgate-tiny"),
        ({"player_0": RolePolicy(agent="smolagents"), "player_1": RolePolicy()}, "roles.player_0.agent", "rollgate"),
    ]
    for policies, field, accepted in cases:
        with pytest.raises(BadRequest) as info:
            await r.run(task(), RunContext(), policies)
        assert info.value.field == field and accepted in info.value.message
    single = task("math", expected_answer="2")  # a single-role environment: no roles to map
    with pytest.raises(BadRequest) as info:
        await r.run(single, RunContext(), {"player_0": RolePolicy(), "player_1": RolePolicy()})
    assert info.value.field == "roles" and "math has a single role" in info.value.message


async def test_the_tiny_model_plays_both_seats_and_each_role_stays_token_exact(tiny_model_dir, env_urls):
    """Self-play with the real tiny model (local backend): whatever it says, each role's prompts
    extend its own previous ids, and the game's rewards still add up to 0."""
    service = build_service(Settings(model={"model_path": tiny_model_dir, "backend": "local"}))
    agent = Agent(
        LocalModelClient(service),
        {TTT: HttpEnvClient(TTT, env_urls[TTT])},
        AgentSettings(max_turns=3, max_output_tokens_per_call=24),
        model_name="rollgate-tiny",
    )
    try:
        policies = {role: RolePolicy(sampling={"temperature": 1.0, "seed": 3}) for role in ("player_0", "player_1")}
        record = await RolesRunner(agent, {}).run(task(), RunContext(), policies)
    finally:
        await agent.envs[TTT].aclose()
        await service.aclose()
    assert record.outcome in (Outcome.completed, Outcome.truncated)
    assert sum(t.reward for t in record.trajectories) == 0
    # the tiny model seldom makes a legal move: the first mover is nudged turn after turn (its
    # prompts grow by the nudges) and the other may never move; whoever moved stays token-exact
    assert max(len(t.turns) for t in record.trajectories) >= 2
    for t in record.trajectories:
        if t.turns:
            assert_token_exact(t)
    seeds = [t.policy.sampling["seed"] for t in record.trajectories]
    assert seeds[0] != seeds[1]  # each role draws its own numbers
