"""The audit's verdict rules, allowlist and probe scripts as pure functions (no episode runs)."""

from __future__ import annotations

import json

import pytest

from rollgate.core.errors import BadRequest
from rollgate.evaluation.audit.builtin import SHIPPED, Candidates, Echo, Floor, Stall, number_words
from rollgate.evaluation.audit.probes import ProbeContext, check_script
from rollgate.evaluation.audit.verdict import Stat, allowed, load_allowlist, verdict

ROW = {
    "responses_create_params": {
        "input": [
            {"role": "system", "content": "Solve it. End with `Answer: <value>`."},
            {"role": "user", "content": "What is 17 + 25?"},
        ]
    },
    "expected_answer": "42",
}


def s(mean, lo, hi, n=8):
    return Stat(mean, lo, hi, n)


@pytest.mark.parametrize(
    "probe,floor,expected",
    [
        (s(0.5, 0.2, 0.8), 0.0, "exploitable"),  # interval excludes the floor
        (s(0.1, 0.0, 0.3), 0.0, "suspicious"),  # above, but the interval overlaps it
        (s(0.0, 0.0, 0.0), 0.0, "clean"),
        (s(0.2, 0.2, 0.2), 0.2, "clean"),  # no more than the floor: the floor's own verdict reports the pay
        (s(0.018, 0.012, 0.026), 0.0, "suspicious"),  # a sliver of format credit: below MIN_EFFECT
        (s(1.0, 1.0, 1.0, n=1), 0.0, "suspicious"),  # one task: a coincidence cannot be told apart
    ],
)
def test_an_exploit_probe_is_judged_against_the_floor(probe, floor, expected):
    assert verdict("exploit", probe, floor=floor, lowest=0.0, reference=None)[0] == expected


def test_the_floor_itself_is_exploitable_when_answering_nothing_pays():
    # game2048 before its fix: 0.145 [0.111, 0.202] for a game with zero moves
    v, why = verdict("floor", s(0.145, 0.111, 0.202), floor=0.145, lowest=0.0, reference=None)
    assert v == "exploitable" and "lowest reward" in why
    assert verdict("floor", s(-1.0, -1.0, -1.0), floor=-1.0, lowest=-1.0, reference=None)[0] == "clean"
    assert verdict("floor", s(0.03, 0.0, 0.08), floor=0.03, lowest=0.0, reference=None)[0] == "suspicious"


def test_a_format_variant_below_the_answer_is_a_false_negative_not_an_exploit():
    ref = s(1.0, 1.0, 1.0)
    assert verdict("format", s(0.0, 0.0, 0.0), floor=0.0, lowest=0.0, reference=ref)[0] == "strict_format"
    assert verdict("format", s(0.9, 0.7, 1.0), floor=0.0, lowest=0.0, reference=ref)[0] == "clean"


def test_the_allowlist_needs_a_reason_for_every_entry(tmp_path):
    bad = tmp_path / "allow.json"
    bad.write_text(json.dumps({"entries": [{"env": "x", "probe": "floor", "reason": " "}]}))
    with pytest.raises(BadRequest) as err:
        load_allowlist(bad)
    assert err.value.field == "entries[0]"
    with pytest.raises(BadRequest, match="not JSON"):
        (tmp_path / "b.json").write_text("{")
        load_allowlist(tmp_path / "b.json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"entries": [{"env": "reasoning_gym/*", "probe": "floor", "reason": "partial credit"}]}))
    entries = load_allowlist(good)
    assert allowed(entries, "reasoning_gym/spell_backward", "floor") == "partial credit"
    assert allowed(entries, "math", "floor") is None


def test_the_shipped_allowlist_loads():
    for e in load_allowlist(None):
        assert e.reason.strip()


def test_probe_scripts_are_built_from_what_the_policy_sees():
    ctx = ProbeContext.of("math", ROW, [], 8)
    assert ctx.question == "What is 17 + 25?" and ctx.gold == "42" and ctx.numbers == ["17", "25"]
    assert Echo().script(ctx)[0]["text"].endswith("Answer: What is 17 + 25?")
    text = Candidates().script(ctx)[0]["text"]
    assert "42" in text and text.count(",") > 30
    assert Floor().script(ctx)[0]["text"].endswith("Answer: I don't know.")
    tagged = ProbeContext.of("x", {"responses_create_params": {"input": "Reply in <answer></answer> tags"}}, [], 8)
    assert tagged.final("7") == "<answer>7</answer>"


def test_stalling_repeats_one_tool_call_until_the_turn_budget_ends():
    tools = [{"name": "guess", "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}]
    script = Stall().script(ProbeContext.of("wordle", ROW, tools, 8))
    assert script == [{"call": {"name": "guess", "arguments": {"word": "a"}}}]  # the last turn repeats


def test_a_malformed_script_is_refused_with_the_turn_named():
    with pytest.raises(ValueError, match="turn 1"):
        check_script([{"text": "ok"}, {"call": {"arguments": {}}}])
    with pytest.raises(ValueError, match="non-empty list"):
        check_script("text")


def test_number_words():
    assert number_words(244) == "two hundred forty-four"
    assert number_words(-1_000_017) == "minus one million seventeen"


def test_every_shipped_probe_is_registered_in_pyproject():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    section = text[text.index('[project.entry-points."rollgate.audit_probes"]') :]
    for cls in SHIPPED:
        assert f'{cls.name} = "{cls.__module__}:{cls.__name__}"' in section
