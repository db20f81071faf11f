"""The GPU paths, where a CUDA GPU is present (`pytest -m gpu tests/gpu`; they skip elsewhere, CI
included): the local backend serving on CUDA with log-probs a trainer's recompute on the GPU
reproduces, a weight update staged on the GPU, and the learning recipe's GRPO phase through
Unsloth (`rollgate train --backend unsloth`), shortened. The whole model-server suite also runs on
CUDA with `ROLLGATE_TEST_DEVICE=cuda pytest tests/model_server`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROMPT = "<|im_start|>user\nWhat is 17 + 25?<|im_end|>\n<|im_start|>assistant\n"


async def test_local_backend_on_cuda_samples_with_log_probs_a_gpu_recompute_reproduces(tiny_model_dir):
    from rollgate.model_server.backend import SamplingParams
    from rollgate.model_server.local import LocalBackend

    backend = LocalBackend.from_pretrained(tiny_model_dir, device="cuda", weight_version="w0")
    try:
        assert backend.engine.device.type == "cuda"
        prompt = backend.tokenizer.encode(PROMPT)
        params = [SamplingParams(max_tokens=24, temperature=0.9, seed=s) for s in range(8)]
        gens = await asyncio.gather(*(backend.generate(prompt, p, None) for p in params))
        again = await backend.generate(prompt, params[3], None)
        assert again.token_ids == gens[3].token_ids  # seeded sampling is reproducible on the GPU
        assert len({tuple(g.token_ids) for g in gens}) > 1  # and unseeded-looking: seeds differ
        for g in gens:
            ids = torch.tensor([g.prompt_ids + g.token_ids], device="cuda")
            with torch.no_grad():
                logits = backend.model(input_ids=ids).logits[0, len(g.prompt_ids) - 1 : -1].float()
            logp = torch.log_softmax(logits / 0.9, -1)
            expected = [float(logp[i, t]) for i, t in enumerate(g.token_ids)]
            assert g.log_probs == pytest.approx(expected, abs=1e-3)
    finally:
        backend.engine.close()


async def test_a_weight_update_on_cuda_changes_what_is_served_and_stamps_its_version(tiny_model_dir):
    from rollgate.model_server.backend import SamplingParams
    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.weights import stage

    backend = LocalBackend.from_pretrained(tiny_model_dir, device="cuda", weight_version="step-0")
    try:
        prompt = backend.tokenizer.encode(PROMPT)
        greedy = SamplingParams(max_tokens=12, temperature=0.0)
        before = await backend.generate(prompt, greedy, None)
        state = {k: v.detach().cpu() for k, v in backend.model.state_dict().items()}
        state["model.norm.weight"] = -state["model.norm.weight"]  # another policy: every logit negated
        backend.load_weights(stage(backend.model, state, complete=True), "step-1")
        after = await backend.generate(prompt, greedy, None)
        assert backend.weight_version == "step-1"
        assert next(backend.model.parameters()).is_cuda
        assert after.token_ids != before.token_ids
    finally:
        backend.engine.close()


def unsloth_missing() -> str | None:
    """Why Unsloth cannot train here (no unsloth, a TRL it does not accept, no bitsandbytes), else None."""
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    from rollgate.trainer_adapters.unsloth import unsloth_problem

    return unsloth_problem()


@pytest.mark.skipif(unsloth_missing() is not None, reason=f"{unsloth_missing()} (docs/trainers/unsloth.md)")
def test_recipe_grpo_through_unsloth_writes_its_outputs(tmp_path: Path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rollgate.cli", "train", "--recipe", "tiny-math-demo", "--out", str(out)]
    cmd += ["--backend", "unsloth", "--train-tasks", "48", "--heldout-tasks", "8", "--sft-epochs", "1"]
    cmd += ["--rl-steps", "2"]
    env = {**os.environ, "ROLLGATE_HOME": str(tmp_path / "home")}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rl_backend"] == "unsloth" and metrics["rl_steps"] == 2
    assert len(metrics["rl_step_seconds"]) == 2
    assert (out / "reward_curve.png").stat().st_size > 0
    assert (out / "model" / "config.json").exists()
    assert [p["phase"] for p in metrics["curve"]][-1] == "rl"


@pytest.mark.parametrize("backend", ["trl", "unsloth"])
def test_the_smollm2_gpu_recipe_shortened_trains_on_the_gpu_through_either_backend(
    tmp_path: Path, backend, smollm2_path
):
    """`rollgate train --recipe smollm2-math-gpu` (SmolLM2-135M-Instruct; `rollgate model get` first),
    a few tasks and one GRPO step: SFT, GRPO and every held-out evaluation on the GPU, the files it
    writes. Rewards are not checked: one step of 16 tasks says nothing about learning."""
    if backend == "unsloth" and unsloth_missing():
        pytest.skip(f"{unsloth_missing()} (docs/trainers/unsloth.md)")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rollgate.cli", "train", "--recipe", "smollm2-math-gpu", "--out", str(out)]
    cmd += ["--backend", backend, "--train-tasks", "16", "--heldout-tasks", "4", "--sft-epochs", "1", "--rl-steps", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rl_backend"] == backend and metrics["config"]["device"] == "cuda"
    assert metrics["parameters"] > 100_000_000 and metrics["sft_steps"] == 1 and metrics["rl_steps"] == 1
    assert metrics["rl_episodes"] == 16 * 8
    assert [p["label"] for p in metrics["curve"]] == ["before", "sft-step-1", "rl-step-1"]
    assert (out / "model" / "model.safetensors").is_file() and (out / "reward_curve.png").stat().st_size > 0


@pytest.mark.parametrize("backend", ["trl", "unsloth"])
def test_the_smollm2_gpu_recipe_generates_grpo_s_rollouts_with_vllm_on_the_gpu(tmp_path: Path, backend, smollm2_path):
    """`--generation vllm` on the GPU: the phase's vLLM server shares the GPU with the trainer (a
    share of its memory: grpo_phase.VLLM_GPU_SHARE) and reloads the weights after every step."""
    from rollgate.model_server.vllm_process import find_vllm_python

    if find_vllm_python() is None:
        pytest.skip("vllm is not importable here and ROLLGATE_VLLM_PYTHON is not set")
    if backend == "unsloth" and unsloth_missing():
        pytest.skip(f"{unsloth_missing()} (docs/trainers/unsloth.md)")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rollgate.cli", "train", "--recipe", "smollm2-math-gpu", "--out", str(out)]
    cmd += ["--backend", backend, "--generation", "vllm", "--train-tasks", "16", "--heldout-tasks", "4"]
    cmd += ["--sft-epochs", "1", "--rl-steps", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rl_generation"] == "vllm" and metrics["rl_backend"] == backend
    assert metrics["rl_steps"] == 2 and len(metrics["rl_push_seconds"]) == 2
    assert metrics["rl_episodes"] == 2 * 16 * 8
