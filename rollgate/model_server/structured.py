"""Structured output: the JSON formats a request may ask for, and their schemas compiled for
constrained decoding.

Each API names it differently: Responses `text.format` ({"type": "json_schema", "name", "schema",
"strict"} or {"type": "json_object"}), Chat Completions `response_format` (the schema under
`json_schema`), Anthropic Messages `output_config.format` ({"type": "json_schema", "schema"}).
All become one `JsonFormat`, which remembers the request's own field names for its errors.

The local backend compiles the schema (`compile_format`) into the automaton of
structured_automaton and masks every decoding step with it; the vllm backend hands the schema to
vLLM. The subset compiled here: `type` (object, array, string, number, integer, boolean, null, or
a list of them), `enum`, `const`, `properties`, `required`, `additionalProperties`, `items`,
`minItems`, `maxItems`, `minLength`, `maxLength`, `anyOf`, local `$ref` (`#`, `#/$defs/...`,
`#/definitions/...`) and annotations (title, description, default, ...). Any other keyword is a
400 naming it; nothing is ignored. Where `properties` are declared, only they are generated (a
valid document needs no others), in any order; an object without `properties` takes any keys."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.model_server.structured_automaton import Arr, Lit, Node, Num, Obj, Ref, Str, Union, any_value

COMPONENT = "model"
ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly"}
)
KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "uniqueItems",
    }
)
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


@dataclass(frozen=True, eq=False)
class JsonFormat:
    """A requested JSON output format. `field` is where the request named it (errors cite it),
    `schema_field` where its schema sits."""

    kind: str  # "json_schema" | "json_object"
    schema: dict[str, Any] | None
    field: str
    schema_field: str
    name: str | None = None
    strict: bool | None = None

    @property
    def key(self) -> str:
        """Equal for equal formats: compiled grammars are cached by it."""
        return json.dumps([self.kind, self.schema], sort_keys=True, separators=(",", ":"))

    def vllm(self) -> dict[str, Any]:
        """vLLM's `structured_outputs` request field (vLLM >= 0.12; older ones took `guided_json`)."""
        return {"json": self.schema} if self.kind == "json_schema" else {"json_object": True}


def _bad(field: str, why: str) -> BadRequest:
    return BadRequest(f"{field}: {why}", component=COMPONENT, field=field)


def _make(kind: Any, schema: Any, field: str, schema_field: str, name: Any = None, strict: Any = None) -> JsonFormat:
    if kind == "json_object":
        return JsonFormat("json_object", None, field, schema_field)
    if kind != "json_schema":
        raise _bad(f"{field}.type", f"unsupported format {kind!r}; expected 'text', 'json_schema' or 'json_object'")
    if not isinstance(schema, dict):
        raise _bad(schema_field, "a json_schema format needs its schema as a JSON object")
    import jsonschema  # ~0.2 s to import: only when a schema arrives

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = schema_field + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        raise _bad(where, f"not a valid JSON schema: {exc.message}") from None
    return JsonFormat(
        "json_schema",
        schema,
        field,
        schema_field,
        name if isinstance(name, str) else None,
        strict if isinstance(strict, bool) else None,
    )


def schema_format(schema: Any, field: str, schema_field: str) -> JsonFormat:
    """A json_schema format for a schema the request gives elsewhere (a tool's parameters)."""
    return _make("json_schema", schema, field, schema_field)


def responses_format(text: Any) -> JsonFormat | None:
    """From a Responses request's `text` field; None for plain text."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("text", "must be an object")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _bad("text.format", "must be an object")
    if fmt.get("type", "text") == "text":
        return None
    return _make(
        fmt.get("type"), fmt.get("schema"), "text.format", "text.format.schema", fmt.get("name"), fmt.get("strict")
    )


def chat_format(response_format: dict[str, Any] | None) -> JsonFormat | None:
    """From a Chat Completions request's `response_format`; None for plain text."""
    if response_format is None or response_format.get("type", "text") == "text":
        return None
    inner = response_format.get("json_schema")
    if response_format.get("type") == "json_schema" and not isinstance(inner, dict):
        raise _bad("response_format.json_schema", "a json_schema format needs {'name': ..., 'schema': {...}}")
    inner = inner if isinstance(inner, dict) else {}
    return _make(
        response_format.get("type"),
        inner.get("schema"),
        "response_format",
        "response_format.json_schema.schema",
        inner.get("name"),
        inner.get("strict"),
    )


def messages_format(fmt: Any) -> JsonFormat | None:
    """From an Anthropic Messages request's `output_config.format`."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _bad("output_config.format", "must be an object")
    return _make(fmt.get("type"), fmt.get("schema"), "output_config.format", "output_config.format.schema")


def check_enforceable(fmt: JsonFormat, backend: Any | None, name: str, *, tools: bool, ignore_eos: str | None) -> None:
    """A 400 unless `backend` (a backend.ConstrainedBackend, None for one without constrained
    decoding, named `name`) enforces the format for this request (`ignore_eos`: the field that
    asked to ignore the end of turn, if one did)."""
    if backend is None:
        raise _bad(
            fmt.field,
            f"the {name!r} backend cannot enforce {fmt.kind} output (it has no constrained decoding); "
            "serve the model with the local or vllm backend, or leave it out",
        )
    if tools:
        raise _bad(
            fmt.field,
            "structured output with tools is not supported here (the constraint would keep the model from "
            'calling them); leave the tools out or send tool_choice "none"',
        )
    if ignore_eos is not None:
        raise _bad(ignore_eos, f"cannot be combined with {fmt.field}: a complete document ends the turn")
    backend.check_format(fmt)  # e.g. compile the schema: a 400 naming a keyword the backend cannot enforce


def compile_format(fmt: JsonFormat) -> Node:
    """The automaton's root node for a format: 400 naming the first keyword it cannot enforce."""
    if fmt.kind == "json_object":
        return any_value().options[0]  # type: ignore[attr-defined]
    assert fmt.schema is not None
    return _Compiler(fmt.schema, fmt.schema_field).compile()


def _literal(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    checks = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    return isinstance(value, checks[kind])


class _Compiler:
    def __init__(self, root: dict[str, Any], where: str):
        self.root, self.where = root, where
        self.any = any_value()
        self.refs: dict[str, Ref] = {}

    def compile(self) -> Node:
        node = self.node(self.root, "")
        for ref, target in self.refs.items():
            if _loops_without_progress(target, set()):
                raise _bad(f"{self.where}.$ref", f"{ref!r} refers to itself without any nesting")
        return node

    def node(self, schema: Any, path: str) -> Node:
        at = self.where + path
        if schema is True or schema == {}:
            return self.any
        if schema is False:
            raise _bad(at, "the schema `false` matches nothing")
        for kw in schema:
            if kw not in KEYWORDS and kw not in ANNOTATIONS:
                raise _bad(
                    f"{at}.{kw}",
                    f"the JSON schema keyword {kw!r} is not supported by this server's constrained decoding "
                    f"(supported: {', '.join(sorted(KEYWORDS))}); leave it out, or serve the model with vLLM",
                )
        if schema.get("uniqueItems"):
            raise _bad(f"{at}.uniqueItems", "uniqueItems: true is not supported by constrained decoding here")
        constraints = set(schema) - ANNOTATIONS - {"$defs", "definitions"}
        if "$ref" in schema:
            if constraints != {"$ref"}:
                raise _bad(f"{at}.$ref", "$ref beside other constraints is not supported; wrap them in anyOf")
            return self.ref(schema["$ref"], at)
        if "anyOf" in schema:
            if constraints != {"anyOf"}:
                raise _bad(f"{at}.anyOf", "anyOf beside other constraints is not supported; move them into each branch")
            return Union([self.node(s, f"{path}.anyOf[{i}]") for i, s in enumerate(schema["anyOf"])])
        types = schema.get("type")
        types = [types] if isinstance(types, str) else list(types) if types is not None else None
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            if "const" in schema and "enum" in schema:
                values = [v for v in values if v == schema["const"]]
            fits = [v for v in values if types is None or any(_is_type(v, t) for t in types)]
            kept = tuple(dict.fromkeys(_literal(v) for v in fits))
            if not kept:
                raise _bad(f"{at}.enum" if "enum" in schema else f"{at}.const", "no value matches the schema's type")
            return Lit(kept)
        if types is None:
            types = self.infer(schema)
            if types is None:
                return self.any
        if "integer" in types and "number" in types:
            types.remove("integer")
        nodes = [self.typed(schema, t, path) for t in types]
        return nodes[0] if len(nodes) == 1 else Union(nodes)

    @staticmethod
    def infer(schema: dict[str, Any]) -> list[str] | None:
        for kind, words in (
            ("object", ("properties", "required", "additionalProperties")),
            ("array", ("items", "minItems", "maxItems")),
            ("string", ("minLength", "maxLength")),
        ):
            if any(w in schema for w in words):
                return [kind]
        return None

    def typed(self, schema: dict[str, Any], kind: str, path: str) -> Node:
        at = self.where + path
        if kind == "string":
            lo, hi = schema.get("minLength", 0), schema.get("maxLength")
            if hi is not None and hi < lo:
                raise _bad(f"{at}.maxLength", f"maxLength {hi} is below minLength {lo}")
            return Str(lo, hi)
        if kind in ("number", "integer"):
            return Num(kind == "integer")
        if kind == "boolean":
            return Lit((b"true", b"false"))
        if kind == "null":
            return Lit((b"null",))
        if kind == "array":
            if "prefixItems" in schema or isinstance(schema.get("items"), list):
                raise _bad(f"{at}.items", "tuple arrays (a list of item schemas) are not supported")
            lo, hi = schema.get("minItems", 0), schema.get("maxItems")
            if hi is not None and hi < lo:
                raise _bad(f"{at}.maxItems", f"maxItems {hi} is below minItems {lo}")
            return Arr(self.node(schema.get("items", True), f"{path}.items"), lo, hi)
        return self.object(schema, path)

    def object(self, schema: dict[str, Any], path: str) -> Node:
        at = self.where + path
        props, required = schema.get("properties"), schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if props is None:
            if required:
                raise _bad(f"{at}.required", "required properties must be declared under properties")
            if extra is False:
                return Obj({}, frozenset())
            return Obj(None, frozenset(), self.node(extra, f"{path}.additionalProperties"))
        missing = [r for r in required if r not in props]
        if missing:
            raise _bad(f"{at}.required", f"required property {missing[0]!r} is not declared under properties")
        key = {name: _literal(name)[1:] for name in props}  # the key after its opening quote
        compiled = {key[name]: self.node(sub, f"{path}.properties.{name}") for name, sub in props.items()}
        return Obj(compiled, frozenset(key[r] for r in required))

    def ref(self, ref: Any, at: str) -> Node:
        if ref in self.refs:
            return self.refs[ref]
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise _bad(f"{at}.$ref", f"only local references ('#/$defs/...') are supported, got {ref!r}")
        target: Any = self.root
        path = ""
        for part in ref[2:].split("/") if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise _bad(f"{at}.$ref", f"{ref!r} does not resolve in the schema")
            target, path = target[part], f"{path}.{part}"
        node = self.refs[ref] = Ref()
        node.target = self.node(target, path)
        return node


def _loops_without_progress(node: Node, seen: set[int]) -> bool:
    """A $ref cycle that never enters an object or array would recurse forever."""
    if isinstance(node, Ref):
        if id(node) in seen:
            return True
        return node.target is not None and _loops_without_progress(node.target, seen | {id(node)})
    if isinstance(node, Union):
        return any(_loops_without_progress(o, seen) for o in node.options)
    return False
