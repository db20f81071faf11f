"""Fixtures of the model server tests: the tiny model served by the local backend."""

from __future__ import annotations

import importlib.util

import pytest

from rollgate.core.metrics import Metrics
from rollgate.core.serving import serve_in_thread
from tests.devices import TEST_DEVICE

CALC_TOOL = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}


# The structured-output guides a local backend can use (settings.model.guide_backend); the
# structured-output and tool_choice tests run on each one installed.
GUIDE_BACKENDS = [
    "native",
    pytest.param(
        "llguidance",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("llguidance") is None, reason="llguidance not installed (rollgate[guides])"
        ),
    ),
]


def serve_local(tiny_model_dir, guide_backend: str = "native"):
    """(service, backend, metrics) over the tiny model, closed when the generator ends."""
    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.service import ModelService

    metrics = Metrics()
    backend = LocalBackend.from_pretrained(
        tiny_model_dir, device=TEST_DEVICE, metrics=metrics, weight_version="w0", guide_backend=guide_backend
    )
    service = ModelService(backend, served_name="rollgate-tiny", metrics=metrics)
    yield service, backend, metrics
    backend.engine.close()


@pytest.fixture(scope="module")
def local_stack(tiny_model_dir):
    """(service, backend, metrics) over the tiny model; one engine per test module."""
    yield from serve_local(tiny_model_dir)


@pytest.fixture(scope="module")
def url(local_stack):
    """The local stack's model service over real HTTP on loopback."""
    from rollgate.model_server.app import create_model_app

    service, _, metrics = local_stack
    with serve_in_thread(create_model_app(service, metrics)) as base:
        yield base


@pytest.fixture(scope="module")
def scripted_url(tiny_model_dir):
    """The scripted backend (instant, deterministic) with the tiny model's tokenizer, over HTTP."""
    from transformers import AutoTokenizer

    from rollgate.model_server.app import create_model_app
    from rollgate.model_server.scripted import ScriptedBackend
    from rollgate.model_server.service import ModelService

    service = ModelService(ScriptedBackend(AutoTokenizer.from_pretrained(tiny_model_dir), max_context=2048))
    with serve_in_thread(create_model_app(service)) as base:
        yield base
