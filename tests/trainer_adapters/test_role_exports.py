"""Per-role trajectories for trainers (docs/roles.md, docs/trainers/): `rollgate export --role`,
NeMo RL batches grouped per role, and TRL rollouts of one trained role against a fixed opponent.

The input is real: `rollgate collect --roles` through a real embedded gateway on loopback playing
TicTacToe, each role's moves scripted on the tiny model's tokenizer (the `scripted` backend), the
opponent served by a second model server named in `role_models`. One job's games are won by
player_0, another's by player_1, so each role has wins and losses in the file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rollgate.cli import main
from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.schemas import ErrorInfo, ErrorKind, Outcome
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.model_server.app import create_model_app
from rollgate.model_server.server import build_service
from rollgate.trainer_adapters.exports import read_trajectories
from rollgate.trainer_adapters.nemo_rl import to_rollout_batch
from rollgate.trainer_adapters.parquet import read_parquet
from rollgate.trainer_adapters.rollouts import GatewayRollouts
from rollgate.trainer_adapters.trl import RollgateRolloutFunc, TaskIndex

pytest.importorskip("textarena")

TTT = "textarena/TicTacToe"


def moves(*cells: int) -> dict[str, str]:
    turns = [{"call": {"name": "act", "arguments": {"action": f"[{c}]"}}} for c in cells] + [{"text": "gg"}]
    return {"rollgate_script": json.dumps(turns)}


def ttt_rows(prefix: str, n: int) -> list[dict]:
    return [
        {
            "responses_create_params": {"input": f"Play TicTacToe (game {i})."},  # distinct prompts for TRL
            "env": TTT,
            "seed": 10 + i,
            "task_id": f"{prefix}-{i}",
        }
        for i in range(n)
    ]


P0_WINS = {"player_0": {"metadata": moves(0, 1, 2)}, "player_1": {"model": "opponent", "metadata": moves(3, 4)}}
P1_WINS = {"player_0": {"metadata": moves(0, 1, 8)}, "player_1": {"model": "opponent", "metadata": moves(3, 4, 5)}}


@pytest.fixture(scope="module")
def gateway_url(tiny_model_dir):
    from rollgate.stack.embedded import build_app

    opponent = Settings(model={"backend": "scripted", "model_path": str(tiny_model_dir), "served_name": "opponent"})
    with serve_in_thread(create_model_app(build_service(opponent)), timeout_s=60) as opponent_url:
        settings = Settings(
            model={"backend": "scripted", "model_path": str(tiny_model_dir)},
            envs=[TTT, "math"],
            gateway={"ui": False},
            role_models={"opponent": opponent_url},
        )
        with serve_in_thread(build_app(settings), timeout_s=120) as url:
            yield url


@pytest.fixture(scope="module")
def games(gateway_url, tmp_path_factory) -> Path:
    """What `rollgate collect --roles` wrote: 6 episodes (4 won by player_0, 2 by player_1), 12 lines."""
    tmp = tmp_path_factory.mktemp("games")
    out = tmp / "games.jsonl"
    for name, rows, roles in (("a", ttt_rows("a", 2), P0_WINS), ("b", ttt_rows("b", 1), P1_WINS)):
        tasks = tmp / f"{name}.jsonl"
        tasks.write_bytes(b"".join(jsonutil.dumps(r) + b"\n" for r in rows))
        argv = ["collect", "--tasks", str(tasks), "--out", str(out), "--gateway", gateway_url, "--no-progress"]
        assert main([*argv, "--roles", json.dumps(roles), "--repeats", "2"]) == 0
    return out


def test_export_one_role_keeps_only_its_trajectories(games, tmp_path, capsys):
    out = tmp_path / "p0.jsonl"
    assert main(["export", "--in", str(games), "--out", str(out), "--role", "player_0"]) == 0
    assert "wrote 6 of 12 trajectories" in capsys.readouterr().out
    kept = list(read_trajectories(out))
    assert {t.role for t in kept} == {"player_0"} and len({t.episode_id for t in kept}) == 6
    assert sorted(t.reward for t in kept) == [-1.0, -1.0, 1.0, 1.0, 1.0, 1.0]
    assert all(t.policy.model == "rollgate-tiny" for t in kept)


def test_export_of_every_role_is_one_sample_per_role_with_its_role_recorded(games, tmp_path):
    assert main(["export", "--in", str(games), "--out", str(tmp_path / "all.jsonl")]) == 0
    every = list(read_trajectories(tmp_path / "all.jsonl"))
    assert [t.model_dump() for t in every] == [t.model_dump() for t in read_trajectories(games)]
    assert main(["export", "--in", str(games), "--out", str(tmp_path / "all.parquet"), "--format", "parquet"]) == 0
    cols = pq.read_table(tmp_path / "all.parquet", columns=["role", "episode_id", "model", "reward"]).to_pydict()
    assert cols["role"] == [t.role for t in every] and cols["episode_id"] == [t.episode_id for t in every]
    assert {(r, m) for r, m in zip(cols["role"], cols["model"], strict=True)} == {
        ("player_0", "rollgate-tiny"),
        ("player_1", "opponent"),
    }
    back = list(read_parquet(tmp_path / "all.parquet"))
    assert [(t.role, t.episode_id, t.turns) for t in back] == [(t.role, t.episode_id, t.turns) for t in every]


def test_sft_export_keeps_each_roles_won_games_with_the_role(games, tmp_path):
    assert main(["export", "--in", str(games), "--out", str(tmp_path / "sft.jsonl"), "--format", "sft"]) == 0
    records = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert sorted(r["role"] for r in records) == ["player_0"] * 4 + ["player_1"] * 2  # the winners only
    assert all(r["reward"] == 1.0 and r["episode_id"].startswith("ep_") for r in records)
    assert all(any(m.get("tool_calls") for m in r["messages"]) for r in records)
    out = tmp_path / "sft1.jsonl"
    assert main(["export", "--in", str(games), "--out", str(out), "--format", "sft", "--role", "player_1"]) == 0
    assert [json.loads(x)["role"] for x in out.read_text().splitlines()] == ["player_1", "player_1"]


def test_an_unknown_role_is_an_error_naming_the_inputs_roles_and_writes_nothing(games, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["export", "--in", str(games), "--out", str(out), "--role", "player_0", "--role", "referee"]) == 2
    err = capsys.readouterr().err
    assert "--role referee" in err and "player_0, player_1" in err
    assert not out.exists()
    single = tmp_path / "single.jsonl"
    t = next(read_trajectories(games)).model_copy(update={"role": None, "episode_id": None})
    single.write_text(t.model_dump_json() + "\n")
    assert main(["export", "--in", str(single), "--out", str(out), "--role", "player_0"]) == 2
    assert "no multi-role trajectories" in capsys.readouterr().err and not out.exists()


def test_nemo_rl_batch_takes_a_failed_episodes_baseline_from_its_own_roles_group(games):
    trajs = list(read_trajectories(games))
    # one episode of a group whose player_0 won both games fails (as an infrastructure failure
    # leaves it: the same error on every role, no reward): its placeholder is its role's mean
    failed_ep = trajs[0].episode_id
    error = ErrorInfo(kind=ErrorKind.upstream, component="model", message="role player_1: down")
    batch = [
        t.model_copy(update={"outcome": Outcome.model_error, "reward": None, "error": error})
        if t.episode_id == failed_ep
        else t
        for t in trajs
    ]
    results = to_rollout_batch(batch)
    placeholders = {
        r["extra_env_info"]["role"]: r["total_reward"]
        for r in results
        if r["extra_env_info"]["episode_id"] == failed_ep
    }
    assert placeholders == {"player_0": 1.0, "player_1": -1.0}  # not 0, the mean over both roles
    assert all(r["loss_multiplier"] == 0.0 for r in results if r["extra_env_info"]["episode_id"] == failed_ep)
    assert {r["extra_env_info"]["role"] for r in results} == {"player_0", "player_1"}


@pytest.mark.parametrize(("train_role", "reward"), [("player_0", 1.0), ("player_1", -1.0)])
def test_trl_rollouts_train_one_role_against_a_fixed_opponent(gateway_url, train_role, reward):
    roles = json.loads(json.dumps(P0_WINS))
    if train_role == "player_1":  # the trained role plays the gateway's model; the other the opponent
        roles = {"player_0": {"model": "opponent", "metadata": moves(0, 1, 2)}, "player_1": {"metadata": moves(3, 4)}}
    rows = ttt_rows("trl", 2)
    index = TaskIndex(rows)
    func = RollgateRolloutFunc(GatewayRollouts(gateway_url, roles=roles, train_role=train_role), index)
    prompts = [p for p in index.dataset()["prompt"] for _ in range(2)]
    try:
        out = func(prompts, None)
    finally:
        func.close()
    trajs = func.last_trajectories
    assert [t.task.task_id for t in trajs] == ["trl-0", "trl-0", "trl-1", "trl-1"]
    assert [t.sample_index for t in trajs] == [0, 1, 0, 1]
    assert out["rollgate_role"] == [train_role] * 4 and out["rollgate_reward"] == [reward] * 4
    assert {t.policy.model for t in trajs} == {"rollgate-tiny"} and len({t.episode_id for t in trajs}) == 4
    for t, prompt_ids, ids, mask in zip(trajs, out["prompt_ids"], out["completion_ids"], out["env_mask"], strict=True):
        assert prompt_ids == t.turns[0].prompt_token_ids and len(ids) == len(mask)
        assert sum(mask) == sum(len(turn.generation_token_ids) for turn in t.turns)  # only its own tokens


def test_trl_roles_are_checked_before_any_rollout(gateway_url):
    good = {"player_0": {}, "player_1": {"model": "opponent"}}
    cases = [
        ({"roles": good, "train_role": "referee"}, "train_role", "player_0, player_1"),
        ({"roles": good}, "train_role", "train_role"),
        ({"train_role": "player_0"}, "roles", "roles"),
        ({"roles": {**good, "player_0": {"model": "opponent"}}, "train_role": "player_0"}, "roles.player_0.model", ""),
        ({"roles": {**good, "player_1": {"temprature": 1}}, "train_role": "player_0"}, "roles.player_1", "temprature"),
    ]
    for kwargs, field, words in cases:
        with pytest.raises(BadRequest) as exc:
            GatewayRollouts(gateway_url, **kwargs)
        assert exc.value.info().field == field and words in exc.value.message, (kwargs, exc.value.message)
    # a role the game does not have: the gateway's 400 names it
    bad = GatewayRollouts(gateway_url, roles={**good, "referee": {}}, train_role="player_0")
    func = RollgateRolloutFunc(bad, TaskIndex(ttt_rows("bad", 1)))
    try:
        with pytest.raises(BadRequest) as exc:
            func(TaskIndex(ttt_rows("bad", 1)).dataset()["prompt"], None)
        assert exc.value.info().field == "roles.referee" and "player_0, player_1" in exc.value.message
    finally:
        func.close()


def test_in_process_rollouts_play_the_trained_role_with_the_trainers_own_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.core.settings import AgentSettings
    from rollgate.trainer_adapters.inprocess import InProcessRollgate

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    budget = AgentSettings(max_turns=2, max_output_tokens=48, max_output_tokens_per_call=24)
    # self-play: both roles are the trainer's model; the trained one (which moves first here) samples cooler
    self_play = {"player_0": {"sampling": {"temperature": 0.5}}, "player_1": {}}
    rollgate = InProcessRollgate(
        model, tokenizer, [TTT, "math"], agent_settings=budget, roles=self_play, train_role="player_0"
    )
    func = rollgate.rollout_func(ttt_rows("ip", 1), sampling={"temperature": 1.0, "seed": 3})
    try:
        out = func(list(func.tasks.dataset()["prompt"]) * 2, None)
        [t0, t1] = func.last_trajectories
        assert out["rollgate_role"] == ["player_0", "player_0"] and t0.episode_id != t1.episode_id
        for t in (t0, t1):
            assert t.role == "player_0" and t.policy.model == "policy" and t.policy.sampling["temperature"] == 0.5
            assert t.ok and t.turns and t.metrics["token_drift"] == 0, (t.outcome, t.error)
        math_row = {"responses_create_params": {"input": "1+1"}, "env": "math", "expected_answer": "2"}
        with pytest.raises(BadRequest) as exc:
            func.tasks = TaskIndex([math_row])
            func(func.tasks.dataset()["prompt"], None)
        assert exc.value.info().field == "rows[0].env" and "single role" in exc.value.message
    finally:
        func.run_async(rollgate.aclose())
        func.close()
