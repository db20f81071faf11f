"""The JSON-schema prefix automaton behind constrained decoding (structured_automaton,
structured.compile_format) and the token side (structured_tokens): which prefixes it accepts,
which it refuses, that it never walks into a dead end, and that what it accepts validates."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from transformers import AutoTokenizer

from rollgate.core.errors import BadRequest
from rollgate.model_server.structured import chat_format, compile_format, messages_format, responses_format
from rollgate.model_server.structured_automaton import MAX_WS, Automaton
from rollgate.model_server.structured_tokens import TokenIndex, token_bytes

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 5},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 1]}, "minItems": 1, "maxItems": 2},
        "ok": {"type": ["boolean", "null"]},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def automaton(schema: dict) -> Automaton:
    fmt = responses_format({"format": {"type": "json_schema", "name": "t", "schema": schema}})
    assert fmt is not None
    return Automaton(compile_format(fmt))


@pytest.mark.parametrize(
    "doc",
    [
        '{"name":"Ada","age":36}',
        '{ "age" : -3 ,\n  "name": "x", "tags": ["a", 1], "ok": null, "score": -0.5e+10 }',
        '{"ok":true,"name":"\\u00e9\\n\\"","age":0,"score":12.25}',
        '{"name":"été","age":7,"tags":["b"]}',  # characters, not bytes, count toward maxLength
    ],
)
def test_matching_documents_and_all_their_prefixes_are_accepted(doc):
    auto = automaton(PERSON)
    data = doc.encode()
    assert auto.matches(data)
    assert all(auto.is_prefix(data[:i]) for i in range(len(data)))
    assert not any(auto.matches(data[:i]) for i in range(len(data)))  # an object is complete only at its '}'
    jsonschema.validate(json.loads(doc), PERSON)


@pytest.mark.parametrize(
    "prefix",
    [
        '{"name":"Ada"}',  # required "age" missing: the brace is refused
        '{"name":"Ada","name"',  # a property twice
        '{"nick"',  # undeclared property (additionalProperties false)
        '{"name":"abcdef"',  # maxLength 5
        '{"name":""}',  # minLength 1
        '{"name":"a","age":1.5',  # integer
        '{"name":"a","age":01',  # leading zero
        '{"name":"a","age":-',  # (a prefix, fine) ...
        '{"name":"a","age":1,"tags":[]',  # minItems 1
        '{"name":"a","age":1,"tags":["a","b",',  # maxItems 2
        '{"name":"a","age":1,"tags":["c"',  # not in the enum
        '{"name":"a","age":1,"ok":"yes"',  # boolean or null
        '{"name":"a\x01',  # a raw control character
        '{"name":"\\x',  # not an escape
        '{"name":"a","age":1,}',  # trailing comma
        '{"name":"a","age":1} ',  # nothing after the document
        "[",  # not an object
    ],
)
def test_invalid_prefixes_are_refused(prefix):
    auto = automaton(PERSON)
    data = prefix.encode()
    if prefix.endswith(":-"):
        assert auto.is_prefix(data) and not auto.matches(data)
        return
    assert not auto.is_prefix(data)


@pytest.mark.parametrize(
    "data",
    [b'{"name":"\xff', b'{"name":"\xc0\xaf', b'{"name":"\xed\xa0\x80', b'{"name":"\xe9"'],
    ids=["invalid-byte", "overlong", "surrogate", "truncated-sequence"],
)
def test_string_content_is_well_formed_utf8(data):
    assert not automaton(PERSON).is_prefix(data)


def test_whitespace_runs_and_number_lengths_are_bounded():
    auto = automaton({"type": "array", "items": {"type": "number"}})
    assert auto.is_prefix(b"[" + b" " * MAX_WS)
    assert not auto.is_prefix(b"[" + b" " * (MAX_WS + 1))
    assert auto.is_prefix(b"[1" + b"2" * 15) and not auto.is_prefix(b"[1" + b"2" * 16)
    assert auto.matches(b"[1e99]") and not auto.is_prefix(b"[1e999")


def test_enum_values_that_prefix_each_other_and_unions():
    auto = automaton({"anyOf": [{"enum": [1, 12, "x"]}, {"type": "null"}]})
    for ok in (b"1", b"12", b'"x"', b"null"):
        assert auto.matches(ok), ok
    assert auto.is_prefix(b"1") and not auto.is_prefix(b"123") and not auto.is_prefix(b'"y')
    typed = automaton({"type": "string", "enum": ["a", 2]})  # 2 is not a string: never generated
    assert typed.matches(b'"a"') and not typed.is_prefix(b"2")


def test_json_object_mode_and_free_objects_take_any_keys():
    fmt = chat_format({"type": "json_object"})
    auto = Automaton(compile_format(fmt))  # type: ignore[arg-type]
    assert auto.matches(b'{"a":[1,{"b":null}],"c":"x","d":{"e":[true,false,-1.5]}}')
    assert auto.matches(b"{}") and not auto.is_prefix(b"[") and not auto.is_prefix(b'"')
    counts = automaton({"type": "object", "additionalProperties": {"type": "integer"}})
    assert counts.matches(b'{"x":1,"y":2}') and not counts.is_prefix(b'{"x":"1"')


def test_local_refs_and_recursion():
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
                },
                "required": ["v", "next"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    }
    auto = automaton(schema)
    doc = b'{"v":1,"next":{"v":2,"next":{"v":3,"next":null}}}'
    assert auto.matches(doc)
    assert not auto.is_prefix(b'{"v":1,"next":{"v":2}')


@pytest.mark.parametrize(
    "schema, field",
    [
        ({"type": "object", "properties": {"code": {"type": "string", "pattern": "^a"}}}, ".properties.code.pattern"),
        ({"type": "string", "format": "date-time"}, ".format"),
        ({"type": "integer", "minimum": 0}, ".minimum"),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, ".oneOf"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, ".uniqueItems"),
        ({"type": "object", "properties": {}, "required": ["a"]}, ".required"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, ".maxLength"),
        ({"$ref": "#"}, ".$ref"),
        ({"$ref": "https://example.org/s.json"}, ".$ref"),
        ({"type": "strnig"}, ".type"),
        ({"anyOf": [{"type": "string"}], "maxLength": 2}, ".anyOf"),
    ],
)
def test_what_cannot_be_enforced_is_a_400_naming_the_keyword(schema, field):
    for make, prefix in (
        (
            lambda s: responses_format({"format": {"type": "json_schema", "name": "t", "schema": s}}),
            "text.format.schema",
        ),
        (
            lambda s: chat_format({"type": "json_schema", "json_schema": {"name": "t", "schema": s}}),
            "response_format.json_schema.schema",
        ),
        (lambda s: messages_format({"type": "json_schema", "schema": s}), "output_config.format.schema"),
    ):
        with pytest.raises(BadRequest) as err:
            compile_format(make(schema))
        assert err.value.status == 400 and err.value.field == prefix + field, err.value.message


def test_malformed_formats_name_their_field():
    for text, field in (
        ({"format": {"type": "xml"}}, "text.format.type"),
        ({"format": {"type": "json_schema", "name": "t"}}, "text.format.schema"),
        ({"format": "json"}, "text.format"),
    ):
        with pytest.raises(BadRequest) as err:
            responses_format(text)
        assert err.value.field == field
    assert responses_format({"format": {"type": "text"}}) is None and chat_format({"type": "text"}) is None


def _walk(auto: Automaton, rng: random.Random, limit: int = 600) -> bytes | None:
    """A random document: random allowed bytes, leaning toward closing ones so walks end."""
    sid, out = auto.start, bytearray()
    closers = set(b'"]}0123456789el')
    for _ in range(limit):
        if auto.accepting[sid] and rng.random() < 0.5:
            return bytes(out)
        allowed = [b for b in range(256) if auto.next(sid, b) >= 0]
        assert allowed or auto.accepting[sid], f"dead end after {bytes(out)!r}"
        if not allowed:
            return bytes(out)
        preferred = [b for b in allowed if b in closers]
        b = rng.choice(preferred if preferred and rng.random() < 0.6 else allowed)
        out.append(b)
        sid = auto.next(sid, b)
    return None


@pytest.mark.parametrize("schema", [PERSON, {"type": "array", "items": {"anyOf": [PERSON, {"type": "string"}]}}])
def test_random_walks_never_dead_end_and_what_is_accepted_validates(schema):
    auto = automaton(schema)
    rng = random.Random(7)
    finished = 0
    for _ in range(40):
        doc = _walk(auto, rng)
        if doc is None:
            continue
        finished += 1
        jsonschema.validate(json.loads(doc.decode("utf-8")), schema)
    assert finished >= 12


def test_token_bytes_decode_like_the_tokenizer(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    pieces = token_bytes(tok)
    assert all(pieces[i] is None for i in tok.all_special_ids)
    text = 'Answer: {"name": "Zoë", "n": [1, 2.5e3], "ok": true}\n\t ü€𝄞'
    ids = tok.encode(text, add_special_tokens=False)
    assert b"".join(pieces[i] for i in ids).decode() == tok.decode(ids) == text  # type: ignore[misc]


def test_masks_allow_exactly_the_tokens_that_keep_a_valid_prefix(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    index = TokenIndex(tok, {tok.eos_token_id})
    fmt = responses_format({"format": {"type": "json_schema", "name": "t", "schema": PERSON}})
    constraint = index.constraint(fmt)  # type: ignore[arg-type]
    auto = constraint.automaton
    for prefix in (b"", b'{"name":"Ad', b'{"name":"Ada","age":3', b'{"age":3,"name":"A"}'):
        sid = auto.feed(auto.start, prefix)
        allowed = set(constraint.allowed(sid))
        for tid, data in enumerate(index.token_bytes):
            if tid == tok.eos_token_id:
                continue
            assert (tid in allowed) == (data is not None and auto.is_prefix(prefix + data)), (prefix, data)
        assert (tok.eos_token_id in allowed) == auto.matches(prefix)
    done = auto.feed(auto.start, b'{"age":3,"name":"A"}')
    assert constraint.allowed(done) == [tok.eos_token_id]  # complete and closed: the turn must end
