"""POST /v1/weights on the gateway fans one update out to every model replica and answers per
replica: two real model servers (`rollgate serve --role model`, scripted backend with the tiny
model's tokenizer, so turns carry real token ids and their weight_version) on loopback, behind
the distributed gateway (its real build_app, with Redis)."""

from __future__ import annotations

import httpx
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from tests.conftest import free_port
from tests.procs import ServerProcess, rollgate_cmd

TOKEN = "fanout-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def replicas(tiny_model_dir, tmp_path_factory):
    from concurrent.futures import ThreadPoolExecutor

    logs = tmp_path_factory.mktemp("fanout")
    env = {
        "ROLLGATE_MODEL__BACKEND": "scripted",
        "ROLLGATE_MODEL__MODEL_PATH": tiny_model_dir,
        "ROLLGATE_API_KEY": TOKEN,
    }
    procs = []
    for i in range(2):
        port = free_port()
        args = rollgate_cmd("serve", "--role", "model", "--port", str(port))
        procs.append(ServerProcess(args, port, env=env, log_path=logs / f"model-{i}.log"))
    try:
        with ThreadPoolExecutor(2) as pool:
            for fut in [pool.submit(p.start, 120) for p in procs]:
                fut.result()
        yield procs
    finally:
        for p in procs:
            p.kill()


@pytest.fixture
def gateway(replicas, redis_url, redis_prefix):
    from rollgate.gateway.server import build_app

    settings = Settings(
        redis_url=redis_url,
        api_key=TOKEN,
        model_url=replicas[0].url,
        model_urls=[p.url for p in replicas],
        gateway={"ui": False, "queue_prefix": redis_prefix},
    )
    with serve_in_thread(build_app(settings)) as url, httpx.Client(base_url=url, headers=AUTH, timeout=60) as client:
        yield client


def turn_version(url: str) -> str | None:
    body = {"model": "rollgate-tiny", "input": "hi", "max_output_tokens": 8}
    # the replicas have a key configured: every route needs it, not only the weight updates
    r = httpx.post(f"{url}/v1/responses", json=body, headers={"x-rollgate-training": "1", **AUTH}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["output"][0]["weight_version"]


def test_an_update_reaches_every_replica_and_their_next_turns_carry_it(gateway, replicas):
    r = gateway.post("/v1/weights", json={"version": "step-3"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] and body["version"] == "step-3"
    assert {x["replica"] for x in body["replicas"]} == {p.url for p in replicas}
    assert all(x["ok"] and x["version"] == "step-3" for x in body["replicas"])
    for p in replicas:
        assert turn_version(p.url) == "step-3"
    states = gateway.get("/v1/weights").json()
    assert [x["version"] for x in states["replicas"]] == ["step-3", "step-3"]


def test_a_refusal_by_every_replica_keeps_their_status_and_names_each(gateway, replicas):
    assert gateway.post("/v1/weights", json={"version": "step-4"}).status_code == 200
    r = gateway.post("/v1/weights", json={"version": "step-5", "path": "/ckpt/step-5"})
    assert r.status_code == 400  # a scripted model server holds no weights to load
    body = r.json()
    assert body["error"]["field"] == "replicas" and all(p.url in body["error"]["message"] for p in replicas)
    assert [(x["ok"], x["status"], x["version"]) for x in body["replicas"]] == [(False, 400, "step-4")] * 2


def test_a_malformed_update_is_refused_once_by_the_gateway(gateway):
    r = gateway.post("/v1/weights", content=b"\x00", headers={"content-type": "application/octet-stream"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "version"
    assert httpx.post(gateway.base_url.join("/v1/weights"), json={"version": "x"}).status_code == 401


def test_a_replica_that_fails_is_named_and_the_others_say_what_they_serve(gateway, replicas):
    replicas[1].kill()  # last test of the module: the fixture is torn down after it
    r = gateway.post("/v1/weights", json={"version": "step-6"})
    assert r.status_code == 502
    body = r.json()
    by_url = {x["replica"]: x for x in body["replicas"]}
    live, dead = by_url[replicas[0].url], by_url[replicas[1].url]
    assert live["ok"] and live["version"] == "step-6"
    assert not dead["ok"] and dead["status"] is None and dead["version"] is None and "unreachable" in dead["error"]
    assert replicas[1].url in body["error"]["message"] and "1 of 2" in body["error"]["message"]
    assert turn_version(replicas[0].url) == "step-6"
