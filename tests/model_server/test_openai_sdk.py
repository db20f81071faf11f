"""The official openai SDK works unchanged against the model server (real HTTP on loopback)."""

from __future__ import annotations

import httpx
import openai
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.model_server.app import create_model_app
from tests.model_server.conftest import CALC_TOOL


@pytest.fixture(scope="module")
def base_url(local_stack):
    service, _, metrics = local_stack
    with serve_in_thread(create_model_app(service, metrics)) as url:
        yield url


@pytest.fixture
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_sdk_create_returns_a_parsed_response(client):
    resp = client.responses.create(
        model="rollgate-tiny", input="What is 2 + 2?", tools=[CALC_TOOL], max_output_tokens=24, temperature=0.5
    )
    assert resp.object == "response" and resp.model == "rollgate-tiny"
    assert resp.status in ("completed", "incomplete")
    assert resp.output and {item.type for item in resp.output} <= {"message", "function_call", "reasoning"}
    assert resp.usage.input_tokens > 0 and 0 < resp.usage.output_tokens <= 24
    for item in resp.output:
        if item.type == "function_call":
            assert item.call_id.startswith("call_") and isinstance(item.arguments, str)


def test_sdk_stream_yields_official_events_and_the_same_final_response(client):
    # The SDK's stream helper wants `response.completed`: pick a seed whose sample ends by itself.
    args = {"model": "rollgate-tiny", "input": "What is 2 + 3?", "max_output_tokens": 64, "temperature": 1.0}
    seed, plain = next(
        (s, r)
        for s in range(20)
        if (r := client.responses.create(**args, extra_body={"seed": s})).status == "completed"
    )
    with client.responses.stream(**args, extra_body={"seed": seed}) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_item.added" in kinds and "response.output_item.done" in kinds
    assert [i.type for i in final.output] == [i.type for i in plain.output]
    assert final.output_text == plain.output_text  # same seed: the stream carries the same text


def test_sdk_stream_true_iterates_events(client):
    events = list(client.responses.create(model="rollgate-tiny", input="Hi", max_output_tokens=8, stream=True))
    assert events[0].type == "response.created"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert text == done.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_training_header_adds_token_fields(base_url):
    body = {"model": "rollgate-tiny", "input": "Hi", "max_output_tokens": 4}
    plain = httpx.post(base_url + "/v1/responses", json=body, timeout=60).json()
    trained = httpx.post(base_url + "/v1/responses", json=body, headers={"x-rollgate-training": "1"}, timeout=60).json()
    assert "generation_token_ids" not in plain["output"][0]
    item = trained["output"][0]
    assert len(item["generation_token_ids"]) == len(item["generation_log_probs"]) > 0


def test_models_lists_the_served_name(client, base_url):
    assert [m.id for m in client.models.list()] == ["rollgate-tiny"]
    metrics = httpx.get(base_url + "/metrics").text
    assert 'rollgate_model_requests_total{backend="local",status="ok"}' in metrics
    assert "rollgate_model_batch_size_bucket" in metrics
