"""String match, state comparison, tool-call comparison and JSON-schema checks."""

from __future__ import annotations

import json

import pytest

from rollgate.verifiers.state import compare_state, state_matches
from rollgate.verifiers.strings import contains_all, exact_match, normalize_text, normalized_match
from rollgate.verifiers.structured import check_json_schema, parse_json_output
from rollgate.verifiers.toolcalls import compare_tool_calls, function_calls


def test_exact_and_normalised_string_match():
    assert exact_match("Paris", "Paris") and not exact_match("paris", "Paris")
    assert normalized_match("  PARIS. ", "Paris")
    assert normalized_match("Café", "cafe")
    assert normalized_match("The Beatles", "beatles", drop_articles=True)
    assert not normalized_match("The Beatles", "beatles")
    assert normalized_match("Rome", ["Paris", "rome"])
    assert normalize_text("\u201cHello   world!\u201d") == "hello world"
    assert contains_all("Q3 Report for Dana", ["q3 report", "budget"]) == ["budget"]


def test_expected_state_is_a_subset_of_actual_state():
    actual = {"events": [{"title": "Sync", "attendees": ["a", "b"], "start": "10:00"}], "count": 3, "extra": True}
    assert state_matches({"count": 3.0, "events": [{"attendees": ["b"]}]}, actual)
    mismatches = compare_state({"count": 4, "missing": 1, "events": [{"title": "Retro"}]}, actual)
    assert sorted(m.path for m in mismatches) == ["count", "events[0]", "missing"]
    assert any("expected 4, got 3" in str(m) for m in mismatches)
    assert compare_state([1, 2], [2, 1], list_mode="exact")
    assert not compare_state([1, 2], [2, 1])
    assert compare_state([1, 1], [1, 2])  # each expected item needs its own actual item
    assert compare_state(True, 1)  # booleans are not numbers
    assert compare_state({"a": 1}, [1])[0].reason.startswith("expected an object")


ITEMS = [
    {"type": "message", "role": "assistant", "content": "calling tools"},
    {"type": "function_call", "name": "lookup", "arguments": json.dumps({"name": "Dana"}), "call_id": "1"},
    {"type": "function_call_output", "call_id": "1", "output": "..."},
    {
        "type": "function_call",
        "name": "send",
        "arguments": json.dumps({"to": "d@x.example", "body": "hi"}),
        "call_id": "2",
    },
    {"type": "function_call", "name": "send", "arguments": "{broken", "call_id": "3"},
]


def test_function_calls_are_read_from_responses_items():
    calls = function_calls(ITEMS)
    assert [c.name for c in calls] == ["lookup", "send", "send"]
    assert calls[0].arguments == {"name": "Dana"} and calls[2].arguments is None


def test_tool_calls_compare_by_name_and_arguments():
    expected = [
        {"name": "send", "arguments": {"to": "d@x.example", "body": "hi"}},
        {"name": "lookup", "arguments": {"name": "Dana"}},
    ]
    unordered = compare_tool_calls(ITEMS, expected)
    assert unordered.matched == 2 and unordered.score == 1.0
    assert [c.name for c in unordered.unexpected] == ["send"]  # the broken call matches nothing
    ordered = compare_tool_calls(ITEMS, expected, ordered=True)
    assert ordered.matched == 1 and ordered.missing[0].name == "lookup" and ordered.score == 0.5
    strict = compare_tool_calls(ITEMS, [{"name": "send", "arguments": {"to": "d@x.example"}}])
    assert strict.matched == 0
    loose = compare_tool_calls(ITEMS, [{"name": "send", "arguments": {"to": "d@x.example"}}], args="subset")
    assert loose.matched == 1
    assert compare_tool_calls([], []).score == 1.0 and compare_tool_calls(ITEMS, []).score == 0.0


SCHEMA = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}


def test_json_schema_check_of_structured_output():
    ok = check_json_schema('Here you go:\n```json\n{"name": "Ada", "age": 36}\n```', SCHEMA)
    assert ok.ok and ok.value == {"name": "Ada", "age": 36}
    bad = check_json_schema({"name": "Ada", "age": -1, "x": 1}, SCHEMA)
    assert not bad.ok and len(bad.errors) == 2
    assert any(e.startswith("age:") for e in bad.errors)
    missing = check_json_schema("not json at all", SCHEMA)
    assert not missing.ok and "no JSON" in missing.errors[0]
    assert parse_json_output(" [1, 2] ") == [1, 2]


def test_a_broken_schema_is_a_data_error():
    with pytest.raises(ValueError, match="invalid JSON schema"):
        check_json_schema("{}", {"type": "no-such-type"})
