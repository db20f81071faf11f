"""The gateway checks a job against the registry it is given (rollgate.jobs.plan), not a
process-wide one: an environment's declared reward range and roles come from that registry's
classes, and an environment it does not know is left to its workers."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from rollgate.core.errors import BadRequest
from rollgate.jobs.plan import RolloutRequest, plan_job
from rollgate.resources_servers.registry import GROUP, EnvRegistry
from tests.resources.toy_env import CounterEnv

ROW = {"responses_create_params": {"input": "add 2"}}


class SignedCounterEnv(CounterEnv):
    """A counter whose reward may be negative: its range is declared on the class."""

    name = "signed_counter"
    reward_range = (-1.0, 1.0)


def registry_of(*classes: type) -> EnvRegistry:
    return EnvRegistry(entry_points=[EntryPoint(c.name, f"{__name__}:{c.__name__}", GROUP) for c in classes])


def eval_job(threshold: float) -> RolloutRequest:
    return RolloutRequest(tasks=[ROW], env="signed_counter", purpose="eval", threshold=threshold)


def test_a_threshold_is_checked_against_the_range_declared_in_the_given_registry():
    registry = registry_of(SignedCounterEnv)
    spec, _ = plan_job(eval_job(-0.5), known_envs=["signed_counter"], model_name="m", registry=registry)
    assert spec.eval is not None and spec.eval.threshold == -0.5
    with pytest.raises(BadRequest, match=r"outside the reward range of 'signed_counter' \(-1, 1\]") as err:
        plan_job(eval_job(1.5), known_envs=["signed_counter"], model_name="m", registry=registry)
    assert err.value.field == "threshold"


def test_an_environment_the_registry_does_not_know_is_held_to_the_usual_range():
    with pytest.raises(BadRequest, match=r"outside the reward range of 'signed_counter' \(0, 1\]"):
        plan_job(eval_job(-0.5), known_envs=["signed_counter"], model_name="m", registry=registry_of())
