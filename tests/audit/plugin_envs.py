"""Environments and probes the audit tests install as a plugin distribution (see test_audit_cli.py).

`lenient_sum` is deliberately exploitable: its verifier credits any reply that contains the right
number anywhere, the hole the audit must flag. `sum_verify_breaks` errors in verify under one
probe, so an environment failing under a probe is reported, not fatal."""

import random

from pydantic import BaseModel

from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.evaluation.audit.probes import Probe
from rollgate.resources_servers.base import Environment, final_response_text

# untrusted environment text that every transcript carries: report.html must show it, escaped
PLANTED = "<script>alert('planted')</script><img src=x onerror=alert('planted')>"


class SumState(BaseModel):
    answer: int


def _rows(name: str, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "system", "content": f"Add the numbers. End with `Answer: <value>`. {PLANTED}"},
                        {"role": "user", "content": f"What is {a} + {b}?"},
                    ]
                },
                "env": name,
                "task_id": f"{name}-{seed}-{i}",
                "seed": rng.getrandbits(31),
                "expected_answer": str(a + b),
            }
        )
    return rows


class LenientSum(Environment):
    name = "lenient_sum"
    description = "a + b, graded by 'the right number appears somewhere' (deliberately exploitable)"
    State = SumState

    def seed(self, task: TaskRow, rng: random.Random) -> SumState:
        return SumState(answer=int(task.model_extra["expected_answer"]))

    def verify(self, state: SumState, request: VerifyRequest) -> VerifyResult:
        text = final_response_text(request)
        return VerifyResult(reward=1.0 if str(state.answer) in text else 0.0)


class SumVerifyBreaks(LenientSum):
    name = "sum_verify_breaks"

    def verify(self, state: SumState, request: VerifyRequest) -> VerifyResult:
        if "I don't know" in final_response_text(request):
            raise RuntimeError("verifier crashed on this reply")
        return super().verify(state, request)


def lenient_tasks(n: int, seed: int, config=None, split: str = "eval") -> list[dict]:
    return _rows("lenient_sum", n, seed)


def breaks_tasks(n: int, seed: int, config=None, split: str = "eval") -> list[dict]:
    return _rows("sum_verify_breaks", n, seed)


def environments():
    from rollgate.resources_servers.registry import EnvSpec

    return [
        EnvSpec(name="lenient_sum", env_class=LenientSum, tasks=lenient_tasks),
        EnvSpec(name="sum_verify_breaks", env_class=SumVerifyBreaks, tasks=breaks_tasks),
    ]


class RaisingProbe(Probe):
    name = "raises"
    description = "a plugin probe with a bug"

    def script(self, ctx):
        raise KeyError("no such field")


class BadScriptProbe(Probe):
    name = "bad_script"
    description = "a plugin probe whose script is not a list of turns"

    def script(self, ctx):
        return "just text"
