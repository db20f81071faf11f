"""Fixtures of the model server tests: the tiny model served by the local backend."""

from __future__ import annotations

import pytest

from rollgate.core.metrics import Metrics
from tests.devices import TEST_DEVICE

CALC_TOOL = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}


@pytest.fixture(scope="module")
def local_stack(tiny_model_dir):
    """(service, backend, metrics) over the tiny model; one engine per test module."""
    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.service import ModelService

    metrics = Metrics()
    backend = LocalBackend.from_pretrained(tiny_model_dir, device=TEST_DEVICE, metrics=metrics, weight_version="w0")
    service = ModelService(backend, served_name="rollgate-tiny", metrics=metrics)
    yield service, backend, metrics
    backend.engine.close()
