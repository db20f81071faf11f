"""Responses gaps a new user of the openai SDK hits: `responses.retrieve`, `previous_response_id`,
and `text.format` (enforced or refused, never silently ignored: test_structured_output.py)."""

from __future__ import annotations

import openai
import pytest

from rollgate.model_server.response_store import ResponseStore

MODEL = "rollgate-tiny"


@pytest.fixture
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_retrieve_returns_the_stored_response(client):
    resp = client.responses.create(model=MODEL, input="Hi", max_output_tokens=8)
    got = client.responses.retrieve(resp.id)
    assert got.model_dump() == resp.model_dump()
    streamed = list(client.responses.create(model=MODEL, input="Hi", max_output_tokens=8, stream=True))
    final = streamed[-1].response
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_store_false_and_unknown_ids_are_404(client):
    resp = client.responses.create(model=MODEL, input="Hi", max_output_tokens=4, store=False)
    for rid in (resp.id, "resp_unknown"):
        with pytest.raises(openai.NotFoundError, match="no stored response"):
            client.responses.retrieve(rid)


def test_previous_response_id_continues_token_exact(client, local_stack):
    eos = local_stack[1].tokenizer.eos_token_id
    meta = {"rollgate_training": "true"}
    first = client.responses.create(
        model=MODEL, input="What is 2 + 2?", max_output_tokens=16, metadata=meta, extra_body={"seed": 1}
    )
    second = client.responses.create(
        model=MODEL,
        input="And 3 + 3?",
        previous_response_id=first.id,
        max_output_tokens=16,
        metadata=meta,
        extra_body={"seed": 2},
    )
    a, b = first.output[0].model_extra, second.output[0].model_extra
    prefix = a["prompt_token_ids"] + a["generation_token_ids"]
    if prefix[-1] != eos:
        prefix.append(eos)
    assert b["prompt_token_ids"][: len(prefix)] == prefix
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_nope", max_output_tokens=4)
    assert err.value.body["field"] == "previous_response_id"


def test_plain_text_format_is_accepted(client):
    ok = client.responses.create(model=MODEL, input="Hi", text={"format": {"type": "text"}}, max_output_tokens=4)
    assert ok.status in ("completed", "incomplete") and ok.text.format.type == "text"


def test_response_store_is_bounded():
    store = ResponseStore(max_entries=2)
    for i in range(3):
        store.put({"id": f"r{i}"}, [])
    assert len(store) == 2 and store.get("r2").response == {"id": "r2"}
    with pytest.raises(Exception, match="no stored response"):
        store.get("r0")
