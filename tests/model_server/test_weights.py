"""POST /v1/weights on a model server (rollgate.model_server.weights): new weights from a checkpoint
directory or uploaded safetensors, stamped with a version on every later turn; a bad update is a
400 naming the tensor, and the old weights and version keep serving. The real tiny model over real
HTTP on loopback; the vllm backend's mapping is checked against a stand-in (vLLM cannot run in the
default tier here: the real one is the opt-in `vllm` tier)."""

from __future__ import annotations

import contextlib

import httpx
import pytest
import torch
from safetensors.torch import save

from rollgate.core.errors import BadRequest, UpstreamError
from rollgate.core.serving import serve_in_thread
from rollgate.model_server.app import create_model_app
from rollgate.model_server.weights import AdminAuth
from tests.devices import TEST_DEVICE

TOKEN = "weights-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    """(base URL, backend) of a model server over its own copy of the tiny model (tests here
    change its weights, so no other module shares it)."""
    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.service import ModelService

    backend = LocalBackend.from_pretrained(tiny_model_dir, device=TEST_DEVICE, weight_version="step-0")
    service = ModelService(backend, served_name="rollgate-tiny")
    app = create_model_app(service, weights_auth=AdminAuth(TOKEN, enabled=True))
    with serve_in_thread(app) as url:
        yield url, backend
    backend.engine.close()


def served(backend) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in backend.model.state_dict().items()}


def turn_version(url: str) -> str | None:
    """The weight_version of a fresh training-mode generation."""
    body = {"model": "rollgate-tiny", "input": "2+2?", "max_output_tokens": 4, "temperature": 0}
    r = httpx.post(f"{url}/v1/responses", json=body, headers={"x-rollgate-training": "1"}, timeout=60)
    assert r.status_code == 200, r.text
    item = r.json()["output"][0]
    assert item["generation_token_ids"]
    return item["weight_version"]


def upload(url: str, tensors: dict[str, torch.Tensor], version: str | None, headers=AUTH) -> httpx.Response:
    params = {"version": version} if version is not None else None
    return httpx.post(
        f"{url}/v1/weights",
        content=save(tensors),
        params=params,
        headers={**headers, "content-type": "application/octet-stream"},
        timeout=60,
    )


def test_a_checkpoint_directory_loads_and_later_turns_carry_its_version(server, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    url, backend = server
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    model.save_pretrained(tmp_path / "ckpt")
    r = httpx.post(
        f"{url}/v1/weights", json={"version": "step-1", "path": str(tmp_path / "ckpt")}, headers=AUTH, timeout=60
    )
    assert r.status_code == 200, r.text
    state = r.json()
    assert state["version"] == "step-1" and state["source"] == "path" and state["backend"] == "local"
    now = served(backend)
    for name, p in model.state_dict().items():
        assert torch.equal(now[name], p), name
    assert turn_version(url) == "step-1"
    assert httpx.get(f"{url}/v1/weights").json()["version"] == "step-1"  # reading it needs no token


def test_uploaded_tensors_load_a_subset_and_bump_the_version(server):
    url, backend = server
    name = "model.norm.weight"
    new = torch.full_like(backend.model.state_dict()[name], 0.75)
    r = upload(url, {name: new}, "step-2")
    assert r.status_code == 200, r.text
    assert r.json()["tensors"] == 1 and r.json()["source"] == "tensors"
    assert torch.equal(backend.model.state_dict()[name], new)
    assert turn_version(url) == "step-2"


def test_a_shape_mismatch_is_a_400_naming_the_tensor_and_the_old_weights_keep_serving(server):
    url, backend = server
    before, version = served(backend), backend.weight_version
    good = "model.layers.0.input_layernorm.weight"  # checked first (names in order), valid
    bad = "model.layers.1.mlp.up_proj.weight"
    shape = list(before[bad].shape)
    tensors = {good: torch.zeros_like(before[good]), bad: torch.zeros(shape[0] + 1, shape[1])}
    r = upload(url, tensors, "step-bad")
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["field"] == f"tensors.{bad}"
    assert bad in err["message"] and str([shape[0] + 1, shape[1]]) in err["message"] and str(shape) in err["message"]
    after = served(backend)
    assert all(torch.equal(after[k], before[k]) for k in before), "a refused update changed the weights"
    assert backend.weight_version == version and turn_version(url) == version


def test_other_bad_updates_name_their_field_and_change_nothing(server, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    url, backend = server
    before, version = served(backend), backend.weight_version
    name = "model.norm.weight"
    r = upload(url, {name: before[name].to(torch.float64)}, "step-x")
    assert r.status_code == 400 and r.json()["error"]["field"] == f"tensors.{name}"
    assert "float64" in r.json()["error"]["message"]
    r = upload(url, {"model.no_such.weight": torch.zeros(2)}, "step-x")
    assert r.status_code == 400 and r.json()["error"]["field"] == "tensors.model.no_such.weight"
    assert upload(url, {name: before[name]}, None).json()["error"]["field"] == "version"
    r = httpx.post(
        f"{url}/v1/weights",
        content=b"not safetensors",
        params={"version": "x"},
        headers={**AUTH, "content-type": "application/octet-stream"},
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "body"
    # a checkpoint must hold every tensor of the model
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    partial = {k: v for k, v in model.state_dict().items() if "layers.0." not in k}
    (tmp_path / "partial").mkdir()
    from safetensors.torch import save_file

    save_file(
        {k: v.contiguous() for k, v in partial.items() if k != "lm_head.weight"},
        tmp_path / "partial" / "model.safetensors",
    )
    r = httpx.post(f"{url}/v1/weights", json={"version": "x", "path": str(tmp_path / "partial")}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["field"] == "path" and "layers.0" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/weights", json={"version": "x", "path": str(tmp_path / "nowhere")}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["field"] == "path"
    r = httpx.post(f"{url}/v1/weights", json={"version": "x"}, headers=AUTH)  # real weights need weights
    assert r.status_code == 400 and r.json()["error"]["field"] == "path"
    r = httpx.post(f"{url}/v1/weights", json={"version": "x", "pth": "/a"}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["field"] == "pth"
    after = served(backend)
    assert all(torch.equal(after[k], before[k]) for k in before) and backend.weight_version == version


def test_weight_updates_need_the_token_while_model_calls_stay_open(server):
    url, backend = server
    version = backend.weight_version
    r = httpx.post(f"{url}/v1/weights", json={"version": "nope"})
    assert r.status_code == 401 and r.json()["error"]["field"] == "authorization"
    r = httpx.post(f"{url}/v1/weights", json={"version": "nope"}, headers={"authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert backend.weight_version == version and turn_version(url) == version
    # auth on but no token configured: refused, saying how to fix it
    with pytest.raises(Exception) as exc:
        AdminAuth(None, enabled=True).check(f"Bearer {TOKEN}")
    assert "ROLLGATE_API_KEY" in str(exc.value)
    AdminAuth(None, enabled=False).check(None)  # auth switched off explicitly: open


def test_the_scripted_backend_takes_a_version_only(tiny_model_dir):
    from rollgate.model_server.scripted import ScriptedBackend
    from rollgate.model_server.service import ModelService

    service = ModelService(ScriptedBackend.from_path(tiny_model_dir), served_name="rollgate-tiny")
    with serve_in_thread(create_model_app(service, weights_auth=AdminAuth(None, enabled=False))) as url:
        r = httpx.post(f"{url}/v1/weights", json={"version": "v7"})
        assert r.status_code == 200 and r.json() == {
            "version": "v7",
            "backend": "scripted",
            "source": "version",
            "tensors": 0,
            "seconds": r.json()["seconds"],
        }
        assert turn_version(url) == "v7"
        r = httpx.post(f"{url}/v1/weights", json={"version": "v8", "path": "/ckpt"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "not_supported"
        r = upload(url, {"x": torch.zeros(1)}, "v8", headers={})
        assert r.status_code == 400 and r.json()["error"]["code"] == "not_supported"
        assert turn_version(url) == "v7"


def _fake_vllm(with_reload: bool, seen: list, *, resets: bool = True):
    """A stand-in for a vLLM server's development routes (vLLM itself is the opt-in vllm tier,
    tests/trainer_adapters/test_vllm_generation.py, which reloads a real one). `resets`: whether
    its prefix cache reset succeeds (vLLM answers {"success": false} when blocks stay held)."""
    from fastapi import FastAPI

    app = FastAPI()
    if with_reload:

        @app.post("/collective_rpc")
        async def rpc(body: dict):
            seen.append(body)
            return {"results": [None]}

        @app.post("/reset_prefix_cache")
        async def reset(reset_running_requests: bool = False):
            seen.append(f"reset_prefix_cache running={reset_running_requests}")
            return {"success": resets}

    return app


def test_the_vllm_backend_reloads_a_path_in_place_and_drops_the_prefix_cache_or_says_it_cannot(tiny_model_dir):
    import asyncio

    from transformers import AutoTokenizer

    from rollgate.model_server.vllm import VllmBackend
    from rollgate.model_server.weights import NotSupported, apply_update

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    seen: list = []

    async def update(urls, path, raw=None):
        backend = VllmBackend(urls, tok, model="m", weight_version="v0")
        try:
            return await apply_update(backend, "v1", path, raw), backend.weight_version
        finally:
            await backend.aclose()

    with contextlib.ExitStack() as stack:
        a = stack.enter_context(serve_in_thread(_fake_vllm(True, seen)))
        b = stack.enter_context(serve_in_thread(_fake_vllm(True, seen)))
        old = stack.enter_context(serve_in_thread(_fake_vllm(False, [])))
        state, version = asyncio.run(update([a, b], "/ckpt/step-1"))
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": "/ckpt/step-1"}}
        # running requests' blocks go too: asynchronous RL reloads while rollouts are generated
        assert version == "v1" and state.source == "path" and seen == [rpc, "reset_prefix_cache running=True"] * 2
        keeps = stack.enter_context(serve_in_thread(_fake_vllm(True, [], resets=False)))
        with pytest.raises(UpstreamError, match="did not drop its prefix cache") as failed:
            asyncio.run(update([a, keeps], "/ckpt/step-2"))
        assert "1 of 2 vLLM servers did not reload" in failed.value.message
        with pytest.raises(NotSupported, match="VLLM_SERVER_DEV_MODE"):
            asyncio.run(update([old], "/ckpt/step-1"))
        with pytest.raises(NotSupported, match="uploaded tensors"):
            asyncio.run(update([a], None, b"bytes"))


def test_the_openai_passthrough_holds_no_weights_and_says_so():
    import asyncio

    from rollgate.model_server.passthrough import OpenAIPassthrough
    from rollgate.model_server.weights import NotSupported, apply_update, current_state

    async def go():
        # nothing listens on port 9: the update must be refused before any request is sent
        backend = OpenAIPassthrough("http://127.0.0.1:9/v1", model="gpt-x")
        try:
            with pytest.raises(NotSupported, match="the openai backend cannot load weights"):
                await apply_update(backend, "v1", "/ckpt/step-1", None)
            with pytest.raises(BadRequest, match="serves real weights"):
                await apply_update(backend, "v1", None, None)
            return current_state(backend)
        finally:
            await backend.aclose()

    state = asyncio.run(go())
    assert state.version is None and state.backend == "openai"
