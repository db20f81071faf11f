"""`rollgate train --recipe smollm2-math`, shortened: a real pretrained model (SmolLM2-135M-Instruct,
fetched and converted by the real `rollgate model get`) through every phase of the recipe: gold
demonstrations rendered with the tools written into its ChatML prompt, SFT of its top layers,
held-out evaluation, GRPO through TRL with the shared-prefix loss, the greedy references and the
paired phase comparisons. It checks the code paths and the files, not rewards: a few steps of a few
tasks say nothing about learning (the full recipe's figures are in docs/trainers/recipes.md).
Minutes on 2 cores, hence the real_model tier (pytest -m real_model), which CI runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rollgate.cli import main
from rollgate.trainer_adapters import recipes

pytestmark = pytest.mark.real_model

FULL = recipes.RECIPES["smollm2-math"]
SHORT = dataclasses.replace(
    FULL,
    train_tasks=8,
    heldout_tasks=4,
    sft=dataclasses.replace(FULL.sft, epochs=1.0, batch_size=4, eval_every=0),
    # the recipe's screening, top layers and the final norm's own rate, on a few tasks
    grpo=dataclasses.replace(
        FULL.grpo, steps=1, prompts_per_step=2, num_generations=2, eval_every=1, screen_tasks=4, screen_samples=2
    ),
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, smollm2_path) -> Path:
    out = tmp_path_factory.mktemp("smollm2") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(recipes.RECIPES, "smollm2-math", SHORT)
        assert main(["train", "--recipe", "smollm2-math", "--out", str(out)]) == 0
    return out


def test_the_shortened_real_model_recipe_writes_every_file(trained):
    m = json.loads((trained / "metrics.json").read_text())
    assert m["recipe"] == "smollm2-math" and m["config"]["model"] == "smollm2-135m-instruct"
    assert m["parameters"] > 100_000_000  # the real 135M model, not a tiny one
    assert m["sft_steps"] == 2 and m["rl_steps"] == 1
    assert [p["label"] for p in m["curve"]] == ["before", "sft-step-2", "rl-step-1"]
    for p in m["curve"]:
        report = json.loads((trained / p["report"] / "report.json").read_text())
        assert report["overall"]["tasks"] == 4 and report["model"]["policy_version"] == p["label"]
    assert set(m["greedy"]) == {"sft", "rl"}
    assert [c["name"] for c in m["comparisons"]] == [
        "final vs before",
        "GRPO vs its start (sampled)",
        "GRPO vs its start (greedy)",
    ]
    for c in m["comparisons"]:
        assert c["tasks"] <= 4 and set(c["mean_reward"]) >= {"diff", "ci"}
    assert m["targets"]["rl_gain_min"] == 0.05
    assert m["rl_screening"]["screened"] == 4 and m["rl_trainable"] == FULL.grpo.trainable
    assert (trained / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (trained / "model" / "model.safetensors").is_file()


def test_sft_trained_only_the_top_layers_and_kept_the_chat_template(trained, smollm2_path):
    import torch
    from safetensors.torch import load_file

    before = load_file(str(Path(smollm2_path) / "model.safetensors"))
    after = load_file(str(trained / "work" / "sft-model" / "model.safetensors"))
    layers = FULL.sft.trainable.split(":")[1]
    top = {f"model.layers.{i}." for i in range(30 - int(layers), 30)}
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed, "SFT changed no weight"
    assert all(any(k.startswith(t) for t in top) or k == "model.norm.weight" for k in changed), sorted(changed)[:5]
    tok_cfg = json.loads((trained / "work" / "sft-model" / "tokenizer_config.json").read_text())
    template = tok_cfg.get("chat_template") or (trained / "work" / "sft-model" / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template


def test_sft_examples_are_the_tokens_the_model_server_serves(trained, smollm2_path):
    """The SFT sequence of a gold episode equals the prompt the model server builds for its last
    call (tools inline in the system prompt, earlier calls and results in the turns) plus the
    final reply: training and serving see the same tokens."""
    from transformers import AutoTokenizer

    from rollgate.model_server.chat import PromptBuilder
    from rollgate.trainer_adapters.recipes.data import template_tools, tokenize_messages

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    record = json.loads((trained / "data" / "sft.jsonl").read_text().splitlines()[0])
    ids, mask = tokenize_messages(tok, record["messages"], template_tools("math"))
    builder = PromptBuilder(tok)
    assert not builder.native_tools  # SmolLM2's template cannot render tools: they are written inline
    text = tok.decode(ids)
    assert "<tools>" in text and '"name": "calculator"' in text and "<tool_call>" in text
    served = builder.render(record["messages"][:-1], template_tools("math"), True)
    assert text.startswith(served)
    assert sum(mask) > 0 and mask[-1] == 1 and ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
