"""Evaluation during training: `purpose: "eval"` jobs, their report and the per-policy-version
summary, over real HTTP on loopback with the memory and the real Redis queue. The test is the
worker: it claims the job's tasks and completes them with rewards chosen so that every metric is
known by construction."""

from __future__ import annotations

import math

import pytest

from rollgate.core.eval_metrics import MetricConfig
from rollgate.core.schemas import Outcome
from rollgate.evaluation.report import build_report
from rollgate.evaluation.samples import Sample
from tests.gateway.serving import NO_EPISODE, gateway_client, work

ROW = {"responses_create_params": {"input": "What is 2+2?"}, "expected_answer": "4"}
FAIL = None  # a sample that ends in model_error: no reward


def row(i: int, env: str = "math") -> dict:
    return {**ROW, "task_id": f"t{i}", "env": env}


async def test_eval_job_report_gives_exact_pass_at_k_and_counts_failures_apart(make_queue):
    queue = make_queue()
    async with gateway_client(queue) as client:
        resp = await client.post(
            "/v1/rollouts",
            json={"tasks": [row(0), row(1), row(2)], "purpose": "eval", "k": 4, "policy_version": "step-3"},
        )
        assert resp.status_code == 201, resp.text
        job = resp.json()
        assert (job["purpose"], job["repeats"], job["num_tasks"]) == ("eval", 4, 12)
        job_id = job["job_id"]
        prog = (await client.get(f"/v1/rollouts/{job_id}")).json()
        assert prog["purpose"] == "eval" and prog["eval"] == {"k": 4, "threshold": 1.0, "pass_k": [1, 2, 4]}
        early = await client.get(f"/v1/rollouts/{job_id}/report")
        assert early.status_code == 409 and "still running" in early.json()["error"]["message"]

        # t0 always right, t1 right 2 of 4, t2 wrong 3 times and one infrastructure failure.
        rewards = {0: [1.0] * 4, 1: [1.0, 0.0, 1.0, 0.0], 2: [0.0, 0.0, FAIL, 0.0]}
        answers = {0: ["4"] * 4, 1: ["4", "5", "4", "5"], 2: ["5", "6", "x", "6"]}
        assert await work(queue, rewards, answers) == 12
        resp = await client.get(f"/v1/rollouts/{job_id}/report")
        assert resp.status_code == 200, resp.text
        report = resp.json()

    assert report["kind"] == "rollgate.eval.report" and report["job"]["job_id"] == job_id
    assert report["model"] == {"name": "rollgate-tiny", "policy_version": "step-3", "weight_versions": ["w7"]}
    overall = report["overall"]
    assert (overall["tasks"], overall["samples"], overall["failed_samples"]) == (3, 12, 1)
    assert overall["failures"] == {"model_error": 1} and overall["tasks_short_of_k"] == 1
    assert overall["mean_reward"]["value"] == pytest.approx(0.5)
    assert overall["pass@1"]["value"] == pytest.approx(0.5)
    assert overall["pass@2"]["value"] == pytest.approx((1 + 5 / 6 + 0) / 3)  # 1 - C(2,2)/C(4,2) for t1
    assert overall["pass@4"] == {"value": 1.0, "ci": [1.0, 1.0], "tasks": 2}  # t2 has 3 valid: left out
    lo, hi = overall["pass@1"]["ci"]
    assert 0.0 <= lo < 0.5 < hi <= 1.0
    assert report["envs"]["math"]["majority_available"] is True

    # The same samples through `rollgate eval`'s own report builder give the same numbers.
    samples = [
        Sample(
            env="math",
            task_id=f"t{i}",
            sample_index=s,
            content_hash=str(i),
            outcome=Outcome.completed if r is not None else Outcome.model_error,
            reward=r,
            answer=answers[i][s] if r is not None else None,
        )
        for i, rs in rewards.items()
        for s, r in enumerate(rs)
    ]
    reference = build_report(samples, MetricConfig(k=4, pass_k=(1, 2, 4)))
    for key in ("mean_reward", "pass@1", "pass@2", "pass@4", "majority@1", "majority@2", "majority@4"):
        assert report["overall"][key] == reference["overall"][key], key
        assert report["envs"]["math"][key] == reference["envs"]["math"][key], key
    for key in ("tasks", "samples", "failed_samples", "failures", "tasks_short_of_k"):
        assert report["overall"][key] == reference["overall"][key], key


async def test_a_task_that_never_became_an_episode_is_a_failure_of_its_own_task(make_queue):
    queue = make_queue()
    async with gateway_client(queue) as client:
        body = {"tasks": [row(0), row(1, "workplace")], "purpose": "eval", "k": 2, "pass_k": [2]}
        job_id = (await client.post("/v1/rollouts", json=body)).json()["job_id"]
        await work(queue, {0: [1.0, 0.0], 1: [NO_EPISODE, 0.5]})
        report = (await client.get(f"/v1/rollouts/{job_id}/report")).json()
    assert report["config"]["pass_k"] == [1, 2]  # pass@1 is always there
    wp = report["envs"]["workplace"]
    assert (wp["samples"], wp["failed_samples"], wp["failures"], wp["tasks_short_of_k"]) == (2, 1, {"failed": 1}, 1)
    assert wp["mean_reward"]["value"] == 0.5 and wp["pass@2"] is None  # one valid sample cannot give pass@2
    assert report["overall"]["pass@2"] == {"value": 1.0, "ci": [1.0, 1.0], "tasks": 1}


async def test_threshold_decides_what_counts_as_correct(make_queue):
    queue = make_queue()
    async with gateway_client(queue) as client:
        job_id = (
            await client.post(
                "/v1/rollouts",
                json={"tasks": [row(0, "workplace")], "purpose": "eval", "repeats": 2, "threshold": 0.5},
            )
        ).json()["job_id"]
        await work(queue, {0: [0.5, 0.25]})
        report = (await client.get(f"/v1/rollouts/{job_id}/report")).json()
    assert report["config"]["correct"] == "reward >= 0.5"
    assert report["overall"]["pass@1"]["value"] == 0.5 and report["overall"]["pass@2"]["value"] == 1.0
    assert report["envs"]["workplace"]["mean_reward"]["value"] == pytest.approx(0.375)


async def test_summary_groups_finished_jobs_by_policy_version_with_evals_beside_training(make_queue):
    queue = make_queue()
    async with gateway_client(queue) as client:

        async def job(version: str, purpose: str, rewards: dict[int, list[float | None]]) -> str:
            body = {"tasks": [row(i) for i in rewards], "policy_version": version, "repeats": 2}
            if purpose == "eval":
                body["purpose"] = "eval"
            resp = await client.post("/v1/rollouts", json=body)
            assert resp.status_code == 201, resp.text
            await work(queue, rewards)
            return resp.json()["job_id"]

        await job("step-0", "train", {0: [0.0, 0.0], 1: [1.0, 0.0]})
        await job("step-0", "train", {0: [1.0, 1.0]})
        e0 = await job("step-0", "eval", {0: [0.0, 0.0], 1: [1.0, FAIL]})
        await job("step-1", "train", {0: [1.0, 1.0], 1: [1.0, 0.0]})
        e1 = await job("step-1", "eval", {0: [1.0, 1.0], 1: [1.0, 0.0]})
        running = (await client.post("/v1/rollouts", json={"tasks": [row(0)], "policy_version": "step-2"})).json()
        resp = await client.get("/v1/rollouts/summary")
        assert resp.status_code == 200, resp.text
        summary = resp.json()
        assert (await client.get("/v1/rollouts/summary", params={"limit": 0})).status_code in (400, 422)

    assert (summary["jobs"], summary["finished_jobs"], summary["running_jobs"]) == (6, 5, 1)
    assert running["job_id"]  # the running job (step-2) is not on the curve
    v0, v1 = summary["versions"]
    assert [v0["policy_version"], v1["policy_version"]] == ["step-0", "step-1"]
    assert v0["train"] == {"jobs": 2, "records": 6, "rewarded": 6, "mean_reward": pytest.approx(3 / 6)}
    assert v1["train"]["mean_reward"] == pytest.approx(3 / 4)
    [ev0], [ev1] = v0["eval"], v1["eval"]
    assert ev0["job_id"] == e0 and ev1["job_id"] == e1
    assert ev0["pass@1"]["value"] == pytest.approx(0.5) and ev0["failed_samples"] == 1  # (0 + 1) / 2 tasks
    assert ev1["pass@1"]["value"] == pytest.approx(0.75) and ev1["pass@2"]["value"] == 1.0
    assert ev1["mean_reward"]["tasks"] == 2 and ev1["model"] == "rollgate-tiny"


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"purpose": "test"}, "purpose", "'train' or 'eval'"),
        ({"purpose": "eval", "k": 0}, "k", "greater than or equal to 1"),
        ({"purpose": "eval", "threshold": 1.5}, "threshold", "outside the reward range of 'math'"),
        ({"purpose": "eval", "threshold": 0.0}, "threshold", "outside the reward range"),
        ({"purpose": "eval", "threshold": "nan"}, "threshold", "valid number"),  # strict: a string is no number
        ({"purpose": "eval", "k": 4, "repeats": 2}, "k", "disagree"),
        ({"purpose": "eval", "k": 4, "pass_k": [8]}, "pass_k", "outside 1..k=4"),
        ({"k": 4}, "k", "only evaluation jobs"),
        ({"threshold": 0.5}, "threshold", "only evaluation jobs"),
    ],
)
async def test_bad_eval_options_are_a_400_naming_the_field(make_queue, body, field, says):
    queue = make_queue()
    async with gateway_client(queue) as client:
        resp = await client.post("/v1/rollouts", json={"tasks": [row(0)], **body})
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["field"] == field and says in error["message"], error
        assert (await client.get("/v1/rollouts")).json()["jobs"] == []  # nothing was queued


async def test_report_is_refused_for_a_training_job_and_unknown_for_a_missing_one(make_queue):
    queue = make_queue()
    async with gateway_client(queue) as client:
        job_id = (await client.post("/v1/rollouts", json={"tasks": [row(0)]})).json()["job_id"]
        await work(queue, {0: [1.0]})
        resp = await client.get(f"/v1/rollouts/{job_id}/report")
        assert resp.status_code == 409 and resp.json()["error"]["field"] == "purpose"  # the job's kind, not the request
        assert (await client.get("/v1/rollouts/job_missing/report")).status_code == 404


async def test_openapi_documents_the_evaluation_fields(make_queue):
    async with gateway_client(make_queue()) as client:
        doc = (await client.get("/openapi.json")).json()
    body = doc["paths"]["/v1/rollouts"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["purpose"]["enum"] == ["train", "eval"]
    assert {"k", "threshold", "pass_k", "tasks", "sampling"} <= set(body["properties"])
    assert "temperature" in body["properties"]["sampling"]["properties"]  # nested models inlined
    assert "/v1/rollouts/summary" in doc["paths"] and "/v1/rollouts/{job_id}/report" in doc["paths"]
    assert math.isfinite(body["properties"]["k"]["anyOf"][0]["maximum"])
