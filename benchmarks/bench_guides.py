"""Structured-output guides compared: this server's own (structured.py + structured_tokens.py)
against llguidance and xgrammar on the CPU, over the same tokenizers.

    python -m benchmarks.bench_guides [--model DIR ...] [--docs N] [--walks N] [--seed S]

Two measurements, each on every tokenizer given (default: the tiny model, plus SmolLM2-135M
when `rollgate model get` has cached it):

- coverage: one schema per JSON Schema keyword. A guide covers a keyword when it compiles the
  schema and every document of --walks random walks (uniform over the allowed tokens, leaning
  towards closing tokens so documents end; at most MAX_STEPS tokens) validates with jsonschema
  (formats checked). "rejected" = it refused the schema; "IGNORED k/n" = it compiled the schema
  but k of n finished documents break it (the keyword was not enforced).
- cost: compile time per schema, and per decoding step the time to mask a logits row (the
  engine's path: the native Guide.constrain, the llguidance guide's constrain (structured_llg:
  bitmask fill, unpacked with numpy, masked_fill); xgrammar's bitmask fill applied the same way)
  and to advance with the sampled token: CPU time of the calling thread (a loaded machine
  inflates it less than wall time), p50/p99 in microseconds over --docs random documents per
  schema, the first (cold) document included: ours fills its per-state mask cache lazily.

A library that is not installed is skipped with a message (llguidance: `pip install
'rollgate[guides]'`; xgrammar is not an extra: its wheel requires torch, transformers, triton).
Prints two tables and writes benchmarks/results/bench_guides.json."""

from __future__ import annotations

import importlib.util
import json
import random
import time
from pathlib import Path
from typing import Any

from benchmarks import cli
from benchmarks.common import percentile, print_table, write_results

MAX_STEPS = 400
CLOSERS = ('"', "}", "]", ",", '"}', '"]', '",', "}}", "]}")

WEATHER_CALL = {
    "type": "object",
    "properties": {
        "name": {"const": "weather"},
        "arguments": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "name": {"type": "string", "maxLength": 24},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
            },
            "required": ["id", "name"],
        },
        "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 4},
        "ok": {"type": "boolean"},
    },
    "required": ["user", "ok"],
}
ENUMS = {
    "type": "object",
    "properties": {
        f"f{i}": {"enum": [f"{w}_{i}" for w in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")]}
        for i in range(8)
    },
    "required": [f"f{i}" for i in range(8)],
}
COST_SCHEMAS = {"tool_call": WEATHER_CALL, "nested": NESTED, "enums": ENUMS}


def _obj(prop: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"v": prop}, "required": ["v"], "additionalProperties": False, **extra}


COVERAGE = {
    "subset (tool call)": WEATHER_CALL,
    "pattern": _obj({"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}),
    "format (date)": _obj({"type": "string", "format": "date"}),
    "minimum/maximum": _obj({"type": "integer", "minimum": 3, "maximum": 17}),
    "exclusiveMinimum": _obj({"type": "integer", "exclusiveMinimum": 5, "maximum": 9}),
    "multipleOf": _obj({"type": "integer", "multipleOf": 5}),
    "oneOf": _obj({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}),
    "allOf": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
        ]
    },
    "not": _obj({"type": "integer", "not": {"enum": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}}),
    "minProperties": {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2},
    "uniqueItems": _obj({"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "uniqueItems": True}),
    "prefixItems": _obj({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}),
    "patternProperties": {
        "type": "object",
        "patternProperties": {"^x_[a-z]+$": {"type": "integer"}},
        "additionalProperties": False,
    },
    "if/then/else": {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
        "required": ["kind", "n"],
        "additionalProperties": False,
        "if": {"properties": {"kind": {"const": "a"}}},
        "then": {"properties": {"n": {"minimum": 10}}},
        "else": {"properties": {"n": {"maximum": -10}}},
    },
    "enum of objects": _obj({"enum": [{"a": 1}, {"b": [2, 3]}]}),
    "nested $ref": {
        "$defs": {
            "coord": {"type": "array", "items": {"enum": [0, 1]}, "maxItems": 2},
            "point": {"type": "object", "properties": {"x": {"$ref": "#/$defs/coord"}}, "required": ["x"]},
        },
        **_obj({"$ref": "#/$defs/point"}),
    },
    "recursive $ref": {
        "type": "object",
        "properties": {"leaf": {"type": "boolean"}, "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
        "required": ["leaf"],
        "additionalProperties": False,
    },
}


class Native:
    """This server's guide, exactly as the local backend builds it."""

    name = "native"

    def __init__(self, tokenizer: Any, eos: int):
        from rollgate.model_server.structured_tokens import TokenIndex

        self.index = TokenIndex(tokenizer, {eos})

    def compile(self, schema: dict[str, Any]) -> Any:
        from rollgate.model_server.structured import schema_format

        return self.index.constraint(schema_format(schema, "bench", "bench.schema"))

    def matcher(self, compiled: Any) -> Any:
        from rollgate.model_server.structured_tokens import Guide

        return Guide(compiled)

    def mask(self, m: Any, logits: Any) -> Any:
        return m.constrain(logits)

    def advance(self, m: Any, token: int) -> None:
        m.advance(token)


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer: Any, eos: int):
        from rollgate.model_server.structured_llg import LlgIndex

        self.index = LlgIndex(tokenizer, {eos})

    def compile(self, schema: dict[str, Any]) -> Any:
        """The guide this server's llguidance backend builds (the same options and digit cap)."""
        from rollgate.model_server.structured import schema_format

        return self.index.constraint(schema_format(schema, "bench", "bench.schema"))

    def matcher(self, compiled: Any) -> Any:
        from rollgate.model_server.structured_llg import LlgGuide

        return LlgGuide(self.index, compiled)

    def mask(self, m: Any, logits: Any) -> Any:
        return m.constrain(logits)

    def advance(self, m: Any, token: int) -> None:
        m.advance(token)


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer: Any, eos: int):
        import xgrammar

        from rollgate.model_server.structured_llg import unpack_bitmask

        self.xgr, self.unpack = xgrammar, unpack_bitmask
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer), stop_token_ids=[eos])
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.bitmask = xgrammar.allocate_token_bitmask(1, len(tokenizer))

    def compile(self, schema: dict[str, Any]) -> Any:
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def mask(self, m: Any, logits: Any) -> Any:
        # the bitmask applied as the llguidance guide applies its own (the same bit layout), so
        # that the two differ only in their grammar engines
        m.fill_next_token_bitmask(self.bitmask)
        return logits.masked_fill(~self.unpack(self.bitmask[0], logits.shape[-1]), float("-inf"))

    def advance(self, m: Any, token: int) -> None:
        m.accept_token(token)


GUIDES = {"native": (Native, None), "llguidance": (LLGuidance, "llguidance"), "xgrammar": (XGrammar, "xgrammar")}
INSTALL = {"llguidance": "pip install 'rollgate[guides]'", "xgrammar": "pip install xgrammar apache-tvm-ffi"}


def walk(guide: Any, compiled: Any, logits: Any, closers: set[int], eos: int, rng: random.Random, times: list):
    """One random document: its token ids (None if it did not end within MAX_STEPS)."""
    m = guide.matcher(compiled)
    out: list[int] = []
    for _ in range(MAX_STEPS):
        t0 = time.thread_time()
        masked = guide.mask(m, logits)
        t1 = time.thread_time()
        allowed = masked.isfinite().nonzero().flatten().tolist()
        if not allowed:
            return out
        ending = [t for t in allowed if t in closers]
        tok = rng.choice(ending if ending and rng.random() < 0.35 else allowed)
        t2 = time.thread_time()
        guide.advance(m, tok)
        times.append(((t1 - t0) * 1e6, (time.thread_time() - t2) * 1e6))
        if tok == eos:
            return out
        out.append(tok)
    return None


def _decode(tokenizer: Any, ids: list[int]) -> Any:
    return json.loads(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def coverage_of(guide: Any, tokenizer: Any, eos: int, closers: set[int], walks: int, rng: random.Random) -> dict:
    import jsonschema
    import torch

    logits = torch.zeros(len(tokenizer))
    result = {}
    for name, schema in COVERAGE.items():
        try:
            compiled = guide.compile(schema)
        except Exception as exc:  # each library has its own error types
            result[name] = {"verdict": "rejected", "why": str(exc).splitlines()[0][:160] if str(exc) else repr(exc)}
            continue
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
        finished = bad = 0
        example = None
        for _ in range(walks):
            ids = walk(guide, compiled, logits, closers, eos, rng, [])
            if ids is None:
                continue
            finished += 1
            try:
                doc = _decode(tokenizer, ids)
                ok = validator.is_valid(doc)
            except ValueError:
                doc, ok = tokenizer.decode(ids), False
            if not ok:
                bad, example = bad + 1, doc
        verdict = "yes" if finished and not bad else f"IGNORED {bad}/{finished}" if bad else "unfinished"
        result[name] = {"verdict": verdict, "finished": finished, "invalid": bad, "invalid_example": example}
    return result


def cost_of(guide: Any, tokenizer: Any, eos: int, closers: set[int], docs: int, rng: random.Random) -> list[dict]:
    import torch

    logits = torch.randn(len(tokenizer), generator=torch.Generator().manual_seed(0))
    rows = []
    for name, schema in COST_SCHEMAS.items():
        t0 = time.perf_counter()
        compiled = guide.compile(schema)
        compile_ms = (time.perf_counter() - t0) * 1e3
        times: list[tuple[float, float]] = []
        for _ in range(docs):
            walk(guide, compiled, logits, closers, eos, rng, times)
        step = [a + b for a, b in times]
        rows.append(
            {
                "schema": name,
                "guide": guide.name,
                "compile_ms": round(compile_ms, 2),
                "steps": len(times),
                "mask_p50_us": round(percentile([a for a, _ in times], 50), 1),
                "mask_p99_us": round(percentile([a for a, _ in times], 99), 1),
                "step_p50_us": round(percentile(step, 50), 1),
                "step_p99_us": round(percentile(step, 99), 1),
                "step_mean_us": round(sum(step) / len(step), 1),
            }
        )
    return rows


def main() -> int:
    p = cli.parser(__doc__)
    p.add_argument("--model", action="append", help="model directory (repeatable; default: tiny + cached SmolLM2)")
    p.add_argument("--docs", type=cli.COUNT, default=20, help="random documents per schema for the cost table")
    p.add_argument("--walks", type=cli.COUNT, default=10, help="random documents per coverage schema")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--guides", default="native,llguidance,xgrammar")
    args = p.parse_args()

    import torch
    from transformers import AutoTokenizer

    from rollgate.core.model_registry import get_model, model_dir
    from rollgate.core.settings import Settings
    from rollgate.model_server.tiny import ensure_tiny_model

    torch.set_num_threads(1)  # thread CPU time below must see all the work
    settings = Settings()
    models = args.model or [str(ensure_tiny_model(Path(settings.model.model_path)))]
    smollm2 = model_dir(get_model("smollm2-135m-instruct"), settings.home)
    if not args.model and smollm2.is_dir():  # only when `rollgate model get` has fetched it
        models.append(str(smollm2))
    guides = []
    for name in args.guides.split(","):
        cls, module = GUIDES[name]
        if module and importlib.util.find_spec(module) is None:
            print(f"skipping {name}: the {module!r} package is not installed ({INSTALL[module]})")
            continue
        if module:
            importlib.import_module(module)  # so that setup_s below is the tokenizer's, not the import's
        guides.append(cls)

    coverage: dict[str, dict] = {}
    cost: list[dict] = []
    for model in models:
        tokenizer = AutoTokenizer.from_pretrained(model)
        eos = tokenizer.eos_token_id
        label = Path(model).name
        closers = {i for i in range(len(tokenizer)) if tokenizer.decode([i]) in CLOSERS} | {eos}
        for cls in guides:
            t0 = time.perf_counter()
            guide = cls(tokenizer, eos)
            setup_s = time.perf_counter() - t0
            rng = random.Random(args.seed)
            coverage.setdefault(label, {})[guide.name] = coverage_of(guide, tokenizer, eos, closers, args.walks, rng)
            for row in cost_of(cls(tokenizer, eos), tokenizer, eos, closers, args.docs, rng):
                cost.append({"tokenizer": f"{label} ({len(tokenizer)})", "setup_s": round(setup_s, 2), **row})

    for label, by_guide in coverage.items():
        names = list(by_guide)
        rows = [{"keyword": kw, **{g: by_guide[g][kw]["verdict"] for g in names}} for kw in COVERAGE]
        print_table(rows, ["keyword", *names], title=f"JSON Schema coverage, {label} tokenizer ({args.walks} walks)")
    cols = ["tokenizer", "schema", "guide", "setup_s", "compile_ms", "steps"]
    cols += ["mask_p50_us", "mask_p99_us", "step_p50_us", "step_p99_us", "step_mean_us"]
    print_table(cost, cols, title=f"cost per decoding step, CPU, {args.docs} random documents per schema")
    path = write_results("bench_guides", {"args": vars(args), "coverage": coverage, "cost": cost})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
