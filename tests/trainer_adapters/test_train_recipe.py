"""`rollgate train`: a shortened tiny-math recipe end to end through the real parts (the math
environment and its calculator, the agent loop, the scripted backend for gold demonstrations, the
local backend serving the policy, TRL's GRPOTrainer, rollgate.evaluation for every curve point),
checking that every code path runs and every file is written. No reward or timing threshold: a
few steps of a few tasks say nothing about learning (the full recipe's figures are in
docs/trainers/recipes.md)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from rollgate.cli import main
from rollgate.core.errors import BadRequest
from rollgate.model_server.tiny import TinyShape
from rollgate.trainer_adapters import recipes
from rollgate.trainer_adapters.recipes.config import AgentBudget, EvalPlan, GRPOPhase, SFTPhase

SHORT = dataclasses.replace(
    recipes.RECIPES["tiny-math"],
    train_tasks=8,
    heldout_tasks=4,
    shape=TinyShape(),  # the embedded tiny shape: seconds, not minutes
    sft=SFTPhase(epochs=1.0, batch_size=4, learning_rate=3e-3, warmup_steps=1, eval_every=1, eval_from=2),
    grpo=GRPOPhase(steps=2, prompts_per_step=2, num_generations=2, max_completion_length=64, eval_every=1),
    eval=EvalPlan(k=1, temperature=1.0, greedy_reference=True),
    agent=AgentBudget(max_turns=3, max_output_tokens=64, max_output_tokens_per_call=32),
)


@pytest.fixture
def short_recipe(monkeypatch):
    monkeypatch.setitem(recipes.RECIPES, "tiny-math", SHORT)
    return SHORT


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(recipes.RECIPES, "tiny-math", SHORT)
        assert main(["train", "--recipe", "tiny-math", "--out", str(out)]) == 0
    return out


def test_a_shortened_recipe_writes_metrics_curve_and_checkpoint(trained):
    m = json.loads((trained / "metrics.json").read_text())
    for key in ("recipe", "heldout_tasks", "reward_before", "reward_after_sft", "reward_after_rl", "steps", "seconds"):
        assert key in m, key
    assert m["recipe"] == "tiny-math" and m["heldout_tasks"] == 4 and m["train_tasks"] == 8
    assert m["sft_steps"] == 2 and m["rl_steps"] == 2 and m["steps"] == 4
    for key in ("reward_before", "reward_after_sft", "reward_after_rl"):
        assert 0.0 <= m[key] <= 1.0
    assert m["seconds"] > 0 and m["gold_demos"] == 8
    # Every curve point is a held-out evaluation report of its own, in the order of training; SFT's
    # from step 2 (eval_from), GRPO's every step.
    labels = [p["label"] for p in m["curve"]]
    assert labels == ["before", "sft-step-2", "rl-step-1", "rl-step-2"]
    assert [p["step"] for p in m["curve"]] == [0, 2, 3, 4]
    for p in m["curve"]:
        report = json.loads((trained / p["report"] / "report.json").read_text())
        assert report["overall"]["tasks"] == 4 and report["overall"]["mean_reward"]["value"] == p["reward"]
        assert report["model"]["policy_version"] == p["label"]
        assert report["train_overlap"]["tasks"] == []  # the strict guard ran against the training file
    assert (trained / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_greedy_references_are_greedy_evaluations_of_the_sft_and_final_checkpoints(trained):
    m = json.loads((trained / "metrics.json").read_text())
    assert set(m["greedy"]) == {"sft", "rl"}
    for phase in ("sft", "rl"):
        ref = m["greedy"][phase]
        assert m[f"reward_after_{phase}_greedy"] == ref["reward"]
        report = json.loads((trained / ref["report"] / "report.json").read_text())
        assert report["model"]["policy_version"] == f"{phase}-greedy"
        assert report["run"]["sampling"]["temperature"] == 0.0 and report["config"]["k"] == 1
        assert report["overall"]["mean_reward"]["value"] == ref["reward"]
        assert report["train_overlap"]["tasks"] == []
    # beside the curve, not on it
    assert not any(p["label"].endswith("greedy") for p in m["curve"])


@pytest.mark.parametrize(
    "plan",
    [EvalPlan(k=1, temperature=1.0), EvalPlan(k=1, temperature=0.0, greedy_reference=True)],
    ids=["off", "greedy"],
)
def test_no_greedy_reference_when_off_or_where_the_evaluation_is_greedy_already(tmp_path, plan):
    from rollgate.trainer_adapters.recipes.runner import RecipeRun

    def evaluate(model_dir, label, *, greedy=False):
        raise AssertionError(f"no evaluation expected, got {label}")

    run = RecipeRun(dataclasses.replace(SHORT, eval=plan), tmp_path / "run", evaluate)
    run._greedy_reference(tmp_path / "no-checkpoint", "sft")  # returns before evaluating anything
    assert "greedy" not in run.state.info


def test_the_checkpoint_is_the_trained_policy(trained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = AutoModelForCausalLM.from_pretrained(trained / "model")
    init = AutoModelForCausalLM.from_pretrained(trained / "work" / "init-model")
    sft = AutoModelForCausalLM.from_pretrained(trained / "work" / "sft-model")
    AutoTokenizer.from_pretrained(trained / "model")
    weights = dict(final.named_parameters())
    sft_weights = dict(sft.named_parameters())
    assert any(not torch.equal(p, sft_weights[n]) for n, p in init.named_parameters()), "SFT changed nothing"
    # GRPO moves the weights only where a group's rewards differ; a few episodes of an untrained
    # model are usually all 0 (zero advantage), so here only its rollouts are checked.
    assert set(weights) == set(sft_weights)
    m = json.loads((trained / "metrics.json").read_text())
    assert m["rl_episodes"] == 2 * 2 * 2 and len(m["rl_train_reward"]) == 2


def test_train_and_heldout_tasks_never_overlap(trained):
    from rollgate.resources_servers.families.splits import row_key

    train = [json.loads(x) for x in (trained / "data" / "train_tasks.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (trained / "data" / "heldout_tasks.jsonl").read_text().splitlines()]
    assert len(train) == 8 and len(held) == 4
    assert {r["split"] for r in train} == {"train"} and {r["split"] for r in held} == {"eval"}
    assert not {row_key("math", r) for r in train} & {row_key("math", r) for r in held}
    sft = [json.loads(x) for x in (trained / "data" / "sft.jsonl").read_text().splitlines()]
    assert len(sft) == 8 and all(r["reward"] == 1.0 for r in sft)
    assert {r["task_id"] for r in sft} <= {r["task_id"] for r in train}


def test_sft_sequences_are_the_tokens_the_policy_is_served(trained):
    """The SFT file is text (rollgate export --format sft); tokenized for training it must equal,
    token for token, what the model server builds when the same episode is played through it."""
    import asyncio

    from rollgate.core.settings import AgentSettings, Settings
    from rollgate.core.tokens import trainable_sequence
    from rollgate.trainer_adapters.recipes.data import (
        gold_episodes,
        gold_script,
        scripted_row,
        template_tools,
        tokenize_messages,
    )
    from rollgate.trainer_adapters.sft import to_sft_record

    model_dir = trained / "model"
    rows = [json.loads(x) for x in (trained / "data" / "train_tasks.jsonl").read_text().splitlines()]
    base = Settings()
    settings = base.model_copy(
        update={
            # the scripted backend with a tokenizer: real token ids, as the local backend would serve them
            "model": base.model.model_copy(update={"backend": "scripted", "model_path": str(model_dir)}),
            "agent": AgentSettings(),  # budgets wide enough for every gold reply in tokens
            "envs": ["math"],
        }
    )
    trajs = asyncio.run(gold_episodes([scripted_row(r, gold_script(r)) for r in rows], settings, "math", 8))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tools = template_tools("math")
    multi_call = 0
    for t in trajs:
        assert t.reward == 1.0 and t.turns
        seq = trainable_sequence(t, filler_token_id=0)
        ids, mask = tokenize_messages(tok, to_sft_record(t)["messages"], tools)
        assert ids == seq.prompt_ids + seq.completion_ids
        assert mask == [0] * len(seq.prompt_ids) + seq.env_mask
        multi_call += len(t.turns) > 2
    assert multi_call >= 1, "no gold path with two tool calls: the multi-turn tokenization went unchecked"


def test_prefix_shared_batches_give_the_full_batch_loss_and_gradients(trained):
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.trainer_adapters.recipes.data import template_tools, tokenize_messages
    from rollgate.trainer_adapters.recipes.sft_phase import batch_loss, common_prefix

    model = AutoModelForCausalLM.from_pretrained(trained / "work" / "init-model")
    tok = AutoTokenizer.from_pretrained(trained / "work" / "init-model")
    records = [json.loads(x) for x in (trained / "data" / "sft.jsonl").read_text().splitlines()]
    batch = [tokenize_messages(tok, r["messages"], template_tools("math")) for r in records[:4]]
    assert common_prefix([ids for ids, _ in batch]) > 50  # the system prompt and tools are shared
    shared, n = batch_loss(model, batch, tok.pad_token_id)
    shared.backward()
    g_shared = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()

    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((4, width), tok.pad_token_id)
    labels = torch.full((4, width), -100)
    attn = torch.zeros((4, width), dtype=torch.long)
    for row, (x, m) in enumerate(batch):
        ids[row, : len(x)] = torch.tensor(x)
        labels[row, : len(x)] = torch.tensor([t if k else -100 for t, k in zip(x, m, strict=True)])
        attn[row, : len(x)] = 1
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    full = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
    full.backward()
    assert n == int((labels[:, 1:] != -100).sum())
    assert torch.allclose(shared, full, atol=1e-5)
    for k, p in model.named_parameters():
        assert torch.allclose(g_shared[k], p.grad, atol=1e-5), k


def test_resume_skips_finished_phases_and_refuses_other_settings(trained, short_recipe, monkeypatch, capsys):
    before = json.loads((trained / "metrics.json").read_text())
    assert main(["train", "--recipe", "tiny-math", "--out", str(trained), "--resume"]) == 0
    after = json.loads((trained / "metrics.json").read_text())
    assert after["curve"] == before["curve"] and after["seconds"] == before["seconds"]
    assert main(["train", "--recipe", "tiny-math", "--out", str(trained), "--resume", "--rl-steps", "5"]) == 2
    assert "--resume" in capsys.readouterr().err


def test_grpo_settings_may_change_on_resume_until_grpo_has_finished(trained, short_recipe, tmp_path, capsys):
    run = tmp_path / "again"
    shutil.copytree(trained, run)
    state = json.loads((run / "state.json").read_text())
    state["done"].remove("rl")  # as if GRPO had been interrupted
    (run / "state.json").write_text(json.dumps(state))
    assert main(["train", "--recipe", "tiny-math", "--out", str(run), "--resume", "--sft-epochs", "2"]) == 2
    assert "only the GRPO settings may change" in capsys.readouterr().err
    assert main(["train", "--recipe", "tiny-math", "--out", str(run), "--resume", "--rl-steps", "3"]) == 0
    m = json.loads((run / "metrics.json").read_text())
    assert m["rl_steps"] == 3 and m["config"]["grpo"]["steps"] == 3
    before = json.loads((trained / "metrics.json").read_text())
    assert [p for p in m["curve"] if p["phase"] != "rl"] == [p for p in before["curve"] if p["phase"] != "rl"]
    assert [p["label"] for p in m["curve"] if p["phase"] == "rl"] == ["rl-step-1", "rl-step-2", "rl-step-3"]
    assert json.loads((run / "state.json").read_text())["config"]["grpo"]["steps"] == 3


def test_an_unknown_recipe_is_refused_by_name(tmp_path, capsys):
    assert main(["train", "--recipe", "tiny-chess", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'tiny-chess'" in err and "tiny-math" in err
    assert not (tmp_path / "x").exists()


def test_a_non_empty_out_dir_is_refused_unless_resuming(tmp_path, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["train", "--recipe", "tiny-math", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "not empty" in err and "--resume" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # nothing written
    assert main(["train", "--recipe", "tiny-math", "--out", str(out), "--resume"]) == 2
    assert "no recipe run to resume" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--rl-steps", "0"),
        ("--train-tasks", "-1"),
        ("--heldout-tasks", "0"),
        ("--sft-epochs", "0"),
        ("--rl-trainable", "lora"),
        ("--rl-learning-rate", "0"),
        ("--rl-learning-rate", "-0.5"),
        ("--rl-set", "steps"),
        ("--rl-set", "nope=1"),
        ("--rl-set", "screen_tasks=many"),
        ("--rl-set", "screen_samples=1"),
        ("--rl-set", "norm_learning_rate=0"),
        ("--rl-set", "screen_keep_solved=2"),
    ],
)
def test_bad_overrides_name_their_flag(tmp_path, capsys, flag, value):
    assert main(["train", "--recipe", "tiny-math", "--out", str(tmp_path / "x"), flag, value]) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_rl_set_reads_each_value_as_its_field_s_type():
    from rollgate.commands.train import _grpo_settings, _read_as

    got = _grpo_settings(["screen_tasks=128", "norm_learning_rate=2e-2", "trainable=top:2", "steps= 3"], GRPOPhase())
    assert got == {"screen_tasks": 128, "norm_learning_rate": 0.02, "trainable": "top:2", "steps": 3}
    assert type(got["screen_tasks"]) is int and type(got["norm_learning_rate"]) is float
    assert _grpo_settings(["norm_learning_rate=none"], GRPOPhase()) == {"norm_learning_rate": None}
    with pytest.raises(BadRequest, match="'2.5' is not of type int"):
        _grpo_settings(["steps=2.5"], GRPOPhase())
    with pytest.raises(BadRequest, match="'none' is not of type float"):
        _grpo_settings(["learning_rate=none"], GRPOPhase())
    assert _read_as(bool, "true") is True and _read_as(bool | None, "0") is False  # for a future switch
    with pytest.raises(ValueError):
        _read_as(bool, "yes please")


def test_a_learned_temperature_is_refused_in_async_mode(tmp_path, capsys):
    argv = ["train", "--recipe", "tiny-math", "--out", str(tmp_path / "x"), "--mode", "async"]
    assert main([*argv, "--rl-trainable", "final_norm_scale"]) == 2
    err = capsys.readouterr().err
    assert "--rl-trainable" in err and "sync" in err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="checks the refusal where vLLM is absent")
@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--generation", "vllm", "--vllm-python", "/no/such/python"], "is not an executable Python"),
        (["--generation", "vllm", "--vllm-python", sys.executable], "cannot import vllm"),
        (["--vllm-python", sys.executable], "--generation vllm only"),
        (["--generation", "vllm"], "vllm is not importable here and $ROLLGATE_VLLM_PYTHON is not set"),
    ],
)
def test_vllm_generation_without_a_vllm_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, flags, says):
    monkeypatch.delenv("ROLLGATE_VLLM_PYTHON", raising=False)
    out = tmp_path / "v"
    assert main(["train", "--recipe", "tiny-math", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert "--vllm-python" in err and says in err
    assert not out.exists()


def test_grpo_generation_is_local_or_vllm_and_a_learned_temperature_stays_local():
    assert GRPOPhase(generation="vllm").generation == "vllm"
    with pytest.raises(ValueError, match="generation must be one of local, vllm"):
        GRPOPhase(generation="sglang")
    with pytest.raises(ValueError, match="local generation only"):
        GRPOPhase(generation="vllm", trainable="final_norm_scale")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no CUDA GPU is present")
def test_backend_unsloth_without_a_gpu_is_refused_naming_the_flag(tmp_path, capsys):
    out = tmp_path / "gpu"
    assert main(["train", "--recipe", "tiny-math", "--out", str(out), "--backend", "unsloth"]) == 2
    err = capsys.readouterr().err
    assert "--backend unsloth" in err and "CUDA GPU" in err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no CUDA GPU is present")
@pytest.mark.parametrize("backend", [[], ["--backend", "trl"], ["--backend", "unsloth"]])
def test_a_gpu_recipe_without_a_gpu_is_refused_before_anything_runs(tmp_path, capsys, backend):
    out = tmp_path / "gpu"
    assert main(["train", "--recipe", "smollm2-math-gpu", "--out", str(out), *backend]) == 2
    err = capsys.readouterr().err
    assert "CUDA GPU" in err and ("--backend" in err if backend[-1:] != ["trl"] else "smollm2-math-gpu" in err)
    assert not out.exists()


def test_the_gpu_recipe_is_the_cpu_recipe_at_a_larger_grpo_budget():
    cpu, gpu = recipes.get_recipe("smollm2-math"), recipes.get_recipe("smollm2-math-gpu")
    assert gpu.device == "cuda" and gpu.on_gpu and not cpu.on_gpu and gpu.grpo.backend == "unsloth"
    same = ("env", "model", "seed", "train_tasks", "heldout_tasks", "sft", "eval", "agent")
    assert all(getattr(gpu, f) == getattr(cpu, f) for f in same)
    episodes = [r.grpo.steps * r.grpo.prompts_per_step * r.grpo.num_generations for r in (cpu, gpu)]
    assert episodes[1] > 2 * episodes[0]  # a GPU's budget: 4,096 GRPO episodes against 1,344
    with pytest.raises(ValueError, match="device"):
        dataclasses.replace(cpu, device="tpu")


def test_screening_trains_grpo_on_the_tasks_it_can_learn_from_and_records_what_it_kept(tmp_path, monkeypatch):
    """Screening and the final norm's own rate, set from the command line (`--rl-set`)."""
    grpo = dataclasses.replace(SHORT.grpo, eval_every=0)
    monkeypatch.setitem(recipes.RECIPES, "tiny-math", dataclasses.replace(SHORT, grpo=grpo))
    out = tmp_path / "screened"
    settings = ["screen_tasks=6", "screen_samples=2", "screen_keep_solved=0.5", "norm_learning_rate=1e-2"]
    argv = ["train", "--recipe", "tiny-math", "--out", str(out), "--rl-trainable", "top:1"]
    assert main([*argv, *(a for s in settings for a in ("--rl-set", s))]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["grpo"]["norm_learning_rate"] == 1e-2 and m["config"]["grpo"]["trainable"] == "top:1"
    s = m["rl_screening"]
    assert s["screened"] == 6 and s["samples"] == 2
    assert s["kept"] + s["all_solved"] + s["all_failed"] == 6
    # per kind of task (the rows' category): the same counts, split
    screened = [json.loads(line) for line in (out / "data" / "train_tasks.jsonl").read_text().splitlines()[:6]]
    assert set(s["by_category"]) == {r["category"] for r in screened}
    for verdict in ("kept", "all_solved", "all_failed", "anchors"):
        assert sum(c[verdict] for c in s["by_category"].values()) == s[verdict]
    # fewer kept than a step's prompts: GRPO trains on all rows rather than on no full batch
    assert s["used"] == ("kept" if s["kept"] >= grpo.prompts_per_step else "all")
    assert m["rl_steps"] == 2 and m["config"]["grpo"]["screen_tasks"] == 6


def test_screening_keeps_a_share_of_each_kind_s_solved_tasks_as_anchors():
    """The pool rule alone (screening's sampling is the test above): every task with contrast, and
    `screen_keep_solved` of each category's all-solved tasks, rounded up, in screening order;
    all-failed tasks never."""
    from rollgate.trainer_adapters.recipes.grpo_phase import choose_pool, verdict

    assert [verdict(r, 1.0) for r in ([1.0, 0.0], [1.0, 1.0], [0.0, 0.5], [])] == [
        "kept",
        "all_solved",
        "all_failed",
        "all_failed",  # every episode failed (infrastructure): no verdict on the task, never trained on
    ]
    kinds = ["shop"] * 5 + ["pack"] * 3 + ["frac"] * 2
    rows = [{"id": i, "category": k} for i, k in enumerate(kinds)]
    verdicts = ["all_solved"] * 4 + ["kept"] + ["all_solved", "kept", "kept"] + ["all_failed"] * 2
    chosen, by_category = choose_pool(rows, verdicts, 0.25)
    assert [r["id"] for r in chosen] == [4, 6, 7, 0, 5]  # kept, then ceil(0.25 x 4) shop and ceil(0.25 x 1) pack
    assert by_category == {
        "frac": {"kept": 0, "all_solved": 0, "all_failed": 2, "anchors": 0},
        "pack": {"kept": 2, "all_solved": 1, "all_failed": 0, "anchors": 1},
        "shop": {"kept": 1, "all_solved": 4, "all_failed": 0, "anchors": 1},
    }
    assert [r["id"] for r in choose_pool(rows, verdicts, 0.0)[0]] == [4, 6, 7]  # the default: no anchors
    assert len(choose_pool(rows, verdicts, 1.0)[0]) == 8
    # a share whose product is whole takes exactly that many (not one more from float rounding)
    many = [{"id": i, "category": "travel"} for i in range(25)]
    assert len(choose_pool(many, ["all_solved"] * 25, 0.28)[0]) == 7  # 0.28 x 25 is 7.000000000000001
    with pytest.raises(ValueError, match="screen_keep_solved"):
        GRPOPhase(screen_keep_solved=1.5)


def one_grpo_step(trained: Path, monkeypatch, tmp_path: Path, **grpo) -> tuple:
    """One GRPO step through TRL's GRPOTrainer on the shortened run's SFT model, with `grpo`'s
    settings. A few-step SFT model scores 0 on every episode, and equal rewards give no update to
    observe, so the reward function alone is replaced (a fake: alternate episodes score 1, every
    group's advantages differ); the episodes, tokens and trainer are the real ones. Returns the
    model, its weights before the step, and the phase's result."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.trainer_adapters import trl as trl_adapter
    from rollgate.trainer_adapters.recipes.data import read_rows
    from rollgate.trainer_adapters.recipes.grpo_phase import train_grpo

    def alternating(prompts=None, completions=None, rollgate_reward=None, **_):
        return [float(i % 2) for i in range(len(rollgate_reward))]

    monkeypatch.setattr(trl_adapter, "rollgate_reward", alternating)
    cfg = dataclasses.replace(SHORT, grpo=dataclasses.replace(SHORT.grpo, steps=1, **grpo))
    model = AutoModelForCausalLM.from_pretrained(trained / "work" / "sft-model")
    tok = AutoTokenizer.from_pretrained(trained / "work" / "sft-model")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = train_grpo(cfg, model, tok, read_rows(trained / "data" / "train_tasks.jsonl"), tmp_path / "grpo")
    assert result.steps == 1
    return model, before, result


@pytest.mark.parametrize("trainable", ["final_norm", "final_norm_scale", "norms", "all"])
def test_grpo_updates_only_the_weights_its_trainable_setting_names(trained, monkeypatch, tmp_path, trainable):
    """One GRPO step (one_grpo_step) with `grpo.trainable`. "final_norm" moves the last
    normalization scale (the one the output layer reads) and nothing else; "final_norm_scale" the
    same scales by one common factor, folded into them after the phase (no parameter of its own
    left behind); "norms" every normalization scale and nothing else; "all", the control, moves the
    rest too. Frozen weights are thawed after the phase."""
    from rollgate.trainer_adapters.recipes.trainable import is_norm

    model, before, result = one_grpo_step(trained, monkeypatch, tmp_path, learning_rate=1e-2, trainable=trainable)
    norms = {
        f"{mn}.{pn}" for mn, m in model.named_modules() if is_norm(m) for pn, _ in m.named_parameters(recurse=False)
    }
    assert norms and len(norms) < len(before)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    if trainable == "final_norm":
        assert moved == {"model.norm.weight"}  # Qwen2's final norm, before the output layer
        assert result.trainable_parameters == before["model.norm.weight"].numel()
    elif trainable == "final_norm_scale":
        assert moved == {"model.norm.weight"} and result.trainable_parameters == 1
        ratio = model.get_parameter("model.norm.weight") / before["model.norm.weight"]
        assert float(ratio.std()) < 1e-5 and abs(float(ratio.mean()) - 1) > 1e-6
        assert set(dict(model.named_parameters())) == set(before)
    elif trainable == "norms":
        assert moved == norms
        assert result.trainable_parameters == sum(before[n].numel() for n in norms)
    else:
        assert moved - norms, "a full-parameter step moved no weight outside the norms"
        assert result.trainable_parameters == sum(p.numel() for p in before.values())
    assert all(p.requires_grad for p in model.parameters())


def test_the_final_norm_steps_at_its_own_rate_beside_the_top_layers(trained, monkeypatch, tmp_path):
    """`norm_learning_rate`: with top:1 trained at 1e-6 and the final norm at 1e-2, one AdamW step
    moves each weight by about its own rate (Adam's first step is ~lr per weight): the norm's
    scales by ~1e-2, the top layer's weights by ~1e-6, the layers below not at all."""
    model, before, _ = one_grpo_step(
        trained, monkeypatch, tmp_path, learning_rate=1e-6, norm_learning_rate=1e-2, trainable="top:1"
    )
    step = {n: float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters()}
    top = len(model.model.layers) - 1
    layer = [v for n, v in step.items() if n.startswith(f"model.layers.{top}.")]
    below = [v for n, v in step.items() if n.startswith("model.layers.") and not n.startswith(f"model.layers.{top}.")]
    assert 5e-3 < step["model.norm.weight"] <= 1.1e-2
    assert 0 < max(layer) <= 1.1e-6 and max(below) == 0


def test_a_step_is_one_batch_under_a_grpo_config_with_other_defaults(trained, monkeypatch, tmp_path):
    """Unsloth swaps TRL's GRPOConfig for a subclass with defaults of its own (gradient accumulation
    2, weight decay 0.001, 8-bit AdamW, a warm-up): on an H200 each step of smollm2-math-gpu took
    2 x 128 episodes. Unsloth imports only on a CUDA GPU, so a subclass with those defaults stands in
    for it here. The phase sets TRL's values itself: a step is one batch of prompts x samples, and
    the optimizer is torch's (8-bit AdamW would need bitsandbytes, absent here)."""
    import trl

    @dataclasses.dataclass
    class UnslothDefaults(trl.GRPOConfig):
        gradient_accumulation_steps: int = 2
        weight_decay: float = 0.001
        optim: str = "adamw_8bit"
        warmup_steps: float = 0.1

    monkeypatch.setattr(trl, "GRPOConfig", UnslothDefaults)
    _, _, result = one_grpo_step(trained, monkeypatch, tmp_path, learning_rate=1e-2)
    assert result.episodes == SHORT.grpo.prompts_per_step * SHORT.grpo.num_generations


def test_a_phase_that_trains_fewer_steps_than_asked_fails(trained, tmp_path):
    """Fewer training tasks than a step's prompts give TRL's sampler no full batch: its epoch is
    empty and training ends at step 0 without a word. The phase says so instead of returning."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.core.errors import RollgateError
    from rollgate.trainer_adapters.recipes.data import read_rows
    from rollgate.trainer_adapters.recipes.grpo_phase import train_grpo

    cfg = dataclasses.replace(SHORT, grpo=dataclasses.replace(SHORT.grpo, steps=1))
    model = AutoModelForCausalLM.from_pretrained(trained / "work" / "sft-model")
    tok = AutoTokenizer.from_pretrained(trained / "work" / "sft-model")
    rows = read_rows(trained / "data" / "train_tasks.jsonl")[:1]
    with pytest.raises(RollgateError, match="GRPO ran 0 of 1 steps: 1 training tasks, 2 prompts a step"):
        train_grpo(cfg, model, tok, rows, tmp_path / "grpo")


def test_fewer_training_tasks_than_a_step_s_prompts_are_refused(short_recipe, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--recipe", "tiny-math", "--out", str(out), "--train-tasks", "1"]) == 2
    err = capsys.readouterr().err
    assert "--train-tasks 1 is fewer than a GRPO step's 2 prompts" in err and not out.exists()


def test_an_unknown_trainable_setting_is_refused():
    with pytest.raises(ValueError, match="trainable"):
        GRPOPhase(trainable="lora")


def test_a_checkpoint_saved_while_the_scale_trains_holds_it_folded(tiny_model_dir, tmp_path):
    """While "final_norm_scale" trains, the model's logits are its norm's output times the scale;
    a checkpoint written then (plain_state_dict: a mid-phase evaluation's) loads into a plain model
    that gives the same logits, and release() leaves the model itself the same."""
    from transformers import AutoModelForCausalLM

    from rollgate.trainer_adapters.recipes.trainable import SCALE, plain_state_dict, restrict_trainable

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    with torch.no_grad():
        plain = model(input_ids=ids).logits
    restriction = restrict_trainable(model, "final_norm_scale")
    (scale,) = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        scale.fill_(1.7)
        scaled = model(input_ids=ids).logits
    torch.testing.assert_close(scaled, plain * 1.7, atol=1e-4, rtol=1e-4)
    state = plain_state_dict(model)
    assert not any(k.endswith(SCALE) for k in state)
    reloaded = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    reloaded.load_state_dict(state)
    restriction.release()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, scaled, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(model(input_ids=ids).logits, scaled, atol=1e-4, rtol=1e-4)
    assert all(p.requires_grad for p in model.parameters()) and not hasattr(model.model.norm, SCALE)
