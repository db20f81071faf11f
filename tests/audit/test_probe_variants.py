"""The probes the issue names beyond the first battery: the gold answer with units, and each tool
called with boundary and wrong-typed arguments for every declared parameter."""

from __future__ import annotations

import json

from rollgate.evaluation.audit.builtin import Units
from rollgate.evaluation.audit.builtin_tools import HUGE, LONG_ARG_CHARS, BoundaryArgs, WrongTypeArgs
from rollgate.evaluation.audit.probes import IDK, ProbeContext, load_probes
from rollgate.evaluation.audit.run import AuditOptions, audit_env, stack_settings
from rollgate.evaluation.sources import StackSource

TOOLS = [
    {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["key"],
        },
    },
    {"name": "flag", "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}}}},
    {"name": "noargs", "parameters": {"type": "object", "properties": {}}},
]


def ctx(question: str, gold: str | None = "18", tools=None, max_turns: int = 64) -> ProbeContext:
    row = {"responses_create_params": {"input": [{"role": "user", "content": question}]}}
    return ProbeContext.of("x", row, tools or [], max_turns, gold=gold)


def test_boundary_arguments_reach_every_declared_parameter_one_at_a_time():
    script = BoundaryArgs().script(ctx("Find it.", tools=TOOLS))
    calls = [t["call"] for t in script[:-1]]
    assert script[-1] == {"text": f"Answer: {IDK}"}  # no answer at the end
    keys = [c["arguments"]["key"] for c in calls if c["name"] == "lookup"]
    assert "" in keys and "x" * LONG_ARG_CHARS in keys
    limits = [c["arguments"].get("limit") for c in calls if c["name"] == "lookup" and "limit" in c["arguments"]]
    assert {0, -1, HUGE, -HUGE} <= set(limits)
    # the other parameters stay valid (the required key at its minimum) while one is varied
    assert all(c["arguments"]["key"] == "a" for c in calls if "limit" in c["arguments"])
    assert {c["name"] for c in calls} == {"lookup"}  # booleans have no boundary; noargs has nothing to vary
    json.dumps(script)  # the scripted backend sends it as JSON


def test_wrong_types_cover_each_parameter_and_a_short_budget_still_reaches_every_tool():
    calls = [t["call"] for t in WrongTypeArgs().script(ctx("Find it.", tools=TOOLS))[:-1]]
    by_param = {}
    for c in calls:
        for name, value in c["arguments"].items():
            by_param.setdefault((c["name"], name), []).append(value)
    assert 123456789 in by_param["lookup", "key"] and None in by_param["lookup", "key"]
    assert "not a number" in by_param["lookup", "limit"]
    assert "yes" in by_param["flag", "on"]
    short = WrongTypeArgs().script(ctx("Find it.", tools=TOOLS, max_turns=3))
    assert len(short) == 3 and {t["call"]["name"] for t in short[:-1]} == {"lookup", "flag"}  # interleaved
    assert WrongTypeArgs().applies(ctx("Find it.")) == "the environment has no tools"
    assert "no tool declares" in BoundaryArgs().applies(ctx("Find it.", tools=[TOOLS[2]]))


def test_units_takes_the_unit_the_question_asks_the_answer_in():
    assert Units().script(ctx("A pen costs $3. What do 6 pens cost?"))[0]["text"] == "Answer: $18"
    assert Units().script(ctx("How many hours does it take?"))[0]["text"] == "Answer: 18 hours"
    assert Units().script(ctx("What percentage of 50 is 9?"))[0]["text"] == "Answer: 18%"
    assert Units().script(ctx("What is the angle (in degrees)?"))[0]["text"] == "Answer: 18 degrees"
    # a unit word that is not the answer's unit: a story's hours, a rotation by 90 degrees
    assert Units().applies(ctx("She read for three hours. How many pages?")) == "the question asks for no unit"
    assert Units().applies(ctx("Rotate the matrix 90 degrees. Its top-left value?")) is not None
    tagged = ctx("How many miles? Put it in <answer></answer>.")
    assert Units().script(tagged)[0]["text"] == "<answer>18 miles</answer>"
    assert Units().applies(ctx("What is $x$ if 2x = 36?")) == "the question asks for no unit"  # LaTeX, not dollars
    assert Units().applies(ctx("How many hours?", gold="blue")) == "the gold answer is not a number"
    assert Units().applies(ctx("How many hours?", gold=None)) == "the task carries no gold answer"


def test_a_real_tool_answers_bad_arguments_with_an_error_the_model_reads_and_pays_nothing():
    opts = AuditOptions(envs=["ledger"], n=3, max_turns=8, resamples=200)
    seen = []

    class Recording:  # the real StackSource; keeps the trajectories the report does not
        def __init__(self, inner):
            self.inner = inner

        def run(self, requests, on_result, **kw):
            return self.inner.run(requests, lambda r, t: (seen.append(t), on_result(r, t)), **kw)

    source = Recording(StackSource(stack_settings(opts, "ledger"), ["ledger"], concurrency=8))
    block = audit_env("ledger", source, load_probes(), ["floor", "tool_boundary_args", "tool_wrong_types"], opts)
    for name in ("tool_boundary_args", "tool_wrong_types"):
        assert block["probes"][name]["verdict"] == "clean" and block["probes"][name]["mean"] == 0.0, block
    wrong = [t for t in seen if t.task.task_id.endswith("~tool_wrong_types")]
    assert len(wrong) == 3 and all(t.outcome.value == "completed" for t in wrong)
    outputs = [m["output"] for m in wrong[0].messages if m.get("type") == "function_call_output"]
    args = [json.loads(m["arguments"]) for m in wrong[0].messages if m.get("type") == "function_call"]
    assert {"account": 123456789} in args and {"account": None} in args
    assert outputs and all("invalid arguments" in o and "account" in o for o in outputs)
