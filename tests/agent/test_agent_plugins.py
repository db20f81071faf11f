"""Agents as plugins (the `rollgate.agents` entry point group), how a worker runs each task with
its job's agent, and the pieces of a harness episode that need no process: turning capture
records into turns (token-exact or segmented) and the TRL adapter's refusal of segmented ones."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from rollgate.agent_server.agent import Agent, RunContext
from rollgate.agent_server.harness.assemble import assemble
from rollgate.agent_server.harness.config import HarnessConfig
from rollgate.agent_server.plugins import DEFAULT_AGENT, AgentParts, AgentRegistry, AgentSet, load_entry_points
from rollgate.core.errors import BadRequest
from rollgate.core.rows import parse_row
from rollgate.core.schemas import Outcome, PolicyRef, TaskRef, Trajectory
from rollgate.core.settings import AgentEntry, AgentSettings, Settings
from rollgate.core.tokens import SegmentedError, segments
from rollgate.jobs.queue import TaskEnvelope
from rollgate.jobs.worker import run_task
from rollgate.trainer_adapters.trl import RollgateRolloutFunc
from tests.trainer_adapters import builders

ROW = {"responses_create_params": {"input": "What is 2+2?"}, "env": "math", "expected_answer": "4", "task_id": "t"}


class EchoAgent:
    """A plugin agent: answers every task with a completed trajectory carrying its greeting."""

    def __init__(self, parts: AgentParts, greeting: str):
        self.parts, self.greeting = parts, greeting
        self.seen: list[RunContext] = []

    async def run(self, task, ctx=None):
        self.seen.append(ctx)
        return Trajectory(
            group_id="g",
            task=TaskRef(env=task.env, task_id=task.task_id, row=task.dump()),
            policy=PolicyRef(model=self.parts.model_name),
            outcome=Outcome.completed,
            reward=1.0,
            metrics={"greeting": self.greeting},
        )


def echo(parts, options):
    return EchoAgent(parts, options.get("greeting", "hello"))


def not_a_factory_at_all():  # an entry point target must be callable; this module attribute is not
    pass


NOT_CALLABLE = 42


def eps(*pairs: tuple[str, str]) -> list[EntryPoint]:
    return [EntryPoint(name, value, "rollgate.agents") for name, value in pairs]


def test_the_shipped_loop_and_the_harness_kinds_are_installed_plugins():
    registry = AgentRegistry()
    assert {"rollgate", "harness", "smolagents"} <= set(registry.names(available_only=False))
    assert DEFAULT_AGENT == "rollgate" and "rollgate" in registry.names()
    assert registry.specs["rollgate"].source == "rollgate = rollgate.agent_server.plugins:rollgate_loop"
    # the kind itself cannot run without a command: listed, unavailable, with the reason
    assert not registry.specs["harness"].available and "command" in registry.specs["harness"].reason
    with pytest.raises(BadRequest, match="'harness' cannot run as configured: command") as exc:
        registry.get("harness")
    assert exc.value.field == "agent"


def test_a_broken_plugin_is_reported_and_the_others_load():
    specs, broken = load_entry_points(
        eps(
            ("echo", f"{__name__}:echo"),
            ("gone", "rollgate_no_such_module:agent"),
            ("number", f"{__name__}:NOT_CALLABLE"),
        )
    )
    assert [s.name for s in specs] == ["echo"]
    errors = {b.source.split(" ")[0]: b.error for b in broken}
    assert errors["gone"].startswith("ModuleNotFoundError") and "expected a factory" in errors["number"]


def test_settings_entries_configure_agents_and_bad_entries_are_reported():
    installed, _ = load_entry_points(eps(("echo", f"{__name__}:echo")))
    entries = [
        AgentEntry(name="polite", kind="echo", greeting="good day"),
        AgentEntry(name="other", kind="no-such-kind"),
        AgentEntry(name="echo", kind="echo"),  # a name already taken
    ]
    registry = AgentRegistry(entries, installed=installed)
    assert registry.names() == ["echo", "polite"]
    reasons = [b.error for b in registry.broken]
    assert any("unknown agent kind 'no-such-kind'; kinds: echo" in r for r in reasons)
    assert any("agent name 'echo' is taken" in r for r in reasons)
    with pytest.raises(BadRequest, match="unknown agent 'nope'; known: echo, polite"):
        registry.get("nope")


def test_a_harness_entry_with_a_bad_template_is_unavailable_naming_the_field():
    from rollgate.agent_server.harness import harness

    installed = AgentRegistry().specs.values()
    entry = AgentEntry(name="typo", kind="harness", command=["h", "{promt}"])
    registry = AgentRegistry([entry], installed=[s for s in installed if s.factory is harness])
    spec = registry.specs["typo"]
    assert not spec.available and spec.reason.startswith("command: ") and "{promt}" in spec.reason
    with pytest.raises(ValueError, match="needs exactly one group"):
        HarnessConfig(command=["h"], answer_pattern="no group")


def test_settings_take_agent_entries():
    s = Settings(agents=[{"name": "mine", "kind": "harness", "command": ["h", "{prompt}"], "max_calls": 4}])
    assert s.agents[0].options == {"command": ["h", "{prompt}"], "max_calls": 4}
    with pytest.raises(ValueError, match="agents.0.name"):
        Settings(agents=[{"name": "has space", "kind": "harness"}])


async def test_the_worker_runs_each_task_with_its_jobs_agent():
    installed, _ = load_entry_points(eps(("echo", f"{__name__}:echo")))
    parts = AgentParts(model=None, envs={"math": None}, settings=AgentSettings(), model_name="m")  # type: ignore[arg-type]
    registry = AgentRegistry([AgentEntry(name="polite", kind="echo", greeting="good day")], installed=installed)
    agents = AgentSet(parts, registry)
    task = parse_row(ROW, known_envs=["math"])

    def envelope(agent):
        return TaskEnvelope(
            job_id="j", key="0.0", index=0, group_id="g", task_id=task.task_id, row=task.dump(), env="math", agent=agent
        )

    record = await run_task(agents, envelope("polite"))
    assert record["outcome"] == "completed" and record["metrics"]["greeting"] == "good day"
    assert agents.get("polite").seen[-1].agent is None  # the name was spent on the choice
    refused = await run_task(agents, envelope("nope"))  # one typed failure record, not a crash
    assert "outcome" not in refused and refused["error"]["field"] == "agent"


async def test_the_shipped_loop_refuses_a_task_meant_for_another_agent():
    agent = Agent(None, {"math": None}, AgentSettings(), model_name="m")  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="runs only the 'rollgate' loop, not 'smolagents'"):
        await agent.run(parse_row(ROW, known_envs=["math"]), RunContext(agent="smolagents"))


def call(index: int, prompt: list[int], gen: list[int], text: str = "", **extra) -> dict:
    choice = {
        "generation_token_ids": gen,
        "generation_log_probs": [-0.5] * len(gen),
        "finish_reason": "stop",
        "weight_version": "w1",
        "message": {"role": "assistant", "content": text, "tool_calls": extra.get("tool_calls", [])},
    }
    return {"index": index, "prompt_token_ids": prompt, "choices": [choice, *extra.get("more", [])]}


def test_calls_that_extend_each_other_assemble_into_one_token_exact_sequence():
    calls = [
        call(
            0, [1, 2, 3], [10, 11], tool_calls=[{"type": "function", "function": {"name": "calc", "arguments": "{}"}}]
        ),
        call(1, [1, 2, 3, 10, 11, 5, 6], [12], "four"),
    ]
    a = assemble({"calls": calls, "dropped_calls": 0})
    assert not a.segmented and a.segments == 1 and len(a.turns) == 2 and a.final_text == "four"
    assert [s.new_prompt_ids for s in segments(a.turns)] == [[1, 2, 3], [5, 6]]
    assert [i["type"] for i in a.output] == ["function_call", "message"] and a.output[0]["name"] == "calc"
    assert a.turns[1].weight_version == "w1" and a.output_tokens == 3


def test_rewritten_history_assembles_into_marked_segments_and_the_budget_cuts_calls():
    calls = [call(0, [1, 2, 3], [10, 11], "a"), call(1, [1, 2, 9, 9], [12], "b"), call(2, [1, 7], [13], "c")]
    a = assemble({"calls": calls}, max_calls=2)
    assert a.segmented and a.segments == 2 and len(a.turns) == 2 and a.calls == 3 and a.final_text == "b"
    assert assemble(None).turns == [] and assemble({"calls": []}).segments == 0


def test_the_choice_the_harness_went_on_with_is_the_turn():
    other = {"generation_token_ids": [20], "generation_log_probs": [-1.0], "finish_reason": "stop", "message": {}}
    calls = [call(0, [1], [10], "first", more=[other]), call(1, [1, 20, 5], [11], "next")]
    a = assemble({"calls": calls})
    assert a.turns[0].generation_token_ids == [20] and not a.segmented


def test_the_trl_adapter_refuses_a_segmented_trajectory_instead_of_mistraining_it():
    segmented = builders.trajectory().model_copy(update={"segmented": True})
    with pytest.raises(SegmentedError, match="is segmented") as exc:
        RollgateRolloutFunc.to_trl([segmented], max_completion_length=None, filler_token_id=0)
    assert exc.value.field == "segmented"
    # a failed one is masked out as any failure is: nothing of it is trained on
    failed = builders.trajectory(outcome=Outcome.env_error).model_copy(update={"segmented": True})
    out = RollgateRolloutFunc.to_trl([failed], max_completion_length=None, filler_token_id=0)
    assert set(out["env_mask"][0]) == {0} and out["rollgate_reward"] == [None]
