"""The scripted backend: an instant, deterministic policy for framework benchmarks and agent
tests, where only Rollgate's own overhead should be measured. It is an honest stand-in for a
model: no forward pass, but the same template, the same output parsing and, when a tokenizer is
configured, real token ids (log-probs 0.0: the policy is deterministic).

metadata `rollgate_script` (a JSON list of turns, each {"call": {"name", "arguments"}} or
{"text": "..."}) plays turn i, where i is the number of function_call_output items in the input.
A turn may add "delay_s" (0 to 60): the backend waits that long before answering (an asyncio sleep,
no CPU), so fault and soak runs can hold episodes mid-flight as a real model's latency would.
Without a script: the first turn calls the first tool with arguments built from its JSON schema,
the next answers "done"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.model_server.backend import CallContext, SamplingParams
from rollgate.model_server.output import Generation
from rollgate.model_server.wire import COMPONENT, FunctionCallOutputItem

SCRIPT_KEY = "rollgate_script"
MAX_DELAY_S = 60.0


def example_value(schema: dict[str, Any]) -> Any:
    """A small valid value for a JSON schema: its default, first enum value, or a minimal value."""
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example_value(schema[key][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return False
    if kind == "array":
        return [example_value(schema["items"])] * int(schema.get("minItems", 0)) if "items" in schema else []
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: example_value(v) for k, v in props.items() if k in required}
    if kind == "null":
        return None
    return "a" * int(schema.get("minLength", 1))


def _turn_text(turn: dict[str, Any]) -> str:
    if "call" in turn:
        call = turn["call"]
        return (
            "<tool_call>"
            + json.dumps({"name": call["name"], "arguments": call.get("arguments", {})}, ensure_ascii=False)
            + "</tool_call>"
        )
    return str(turn.get("text", ""))


def _script(ctx: CallContext) -> list[dict[str, Any]]:
    raw = (ctx.request.metadata or {}).get(SCRIPT_KEY)
    if raw is None:
        tools = ctx.request.tools or []
        if not tools:
            return [{"text": "done"}]
        first = tools[0]
        return [{"call": {"name": first.name, "arguments": example_value(first.parameters or {})}}, {"text": "done"}]
    try:
        script = json.loads(raw)
        if not isinstance(script, list) or not all(
            isinstance(t, dict)
            and (
                isinstance(t.get("text"), str)
                or (isinstance(t.get("call"), dict) and isinstance(t["call"].get("name"), str))
            )
            for t in script
        ):
            raise ValueError('each turn must be {"call": {"name": ..., "arguments": {...}}} or {"text": ...}')
        for t in script:
            delay = t.get("delay_s", 0)
            if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= MAX_DELAY_S:
                raise ValueError(f"delay_s must be a number of seconds from 0 to {MAX_DELAY_S:g}, got {delay!r}")
    except ValueError as exc:
        raise BadRequest(
            f"metadata.{SCRIPT_KEY}: not a valid script: {exc}", component=COMPONENT, field=f"metadata.{SCRIPT_KEY}"
        ) from None
    return script


class ScriptedBackend:
    name = "scripted"

    def __init__(self, tokenizer=None, *, max_context: int | None = None, weight_version: str | None = "scripted"):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.weight_version = weight_version

    @classmethod
    def from_path(cls, path: str | None) -> ScriptedBackend:
        from rollgate.model_server.tiny import is_model_dir

        if path and is_model_dir(path):
            from transformers import AutoConfig, AutoTokenizer

            config = AutoConfig.from_pretrained(path)
            return cls(
                AutoTokenizer.from_pretrained(path), max_context=getattr(config, "max_position_embeddings", None)
            )
        return cls()

    def ready(self) -> bool:
        return True

    def set_weight_version(self, version: str) -> None:
        """A weight update with no weights (POST /v1/weights {"version": ...}): later turns carry
        `version`, so cluster tests can follow an update through every replica."""
        self.weight_version = version

    async def generate(self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext) -> Generation:
        script = _script(ctx)
        i = sum(isinstance(item, FunctionCallOutputItem) for item in ctx.items)
        turn = script[min(i, len(script) - 1)]
        if turn.get("delay_s"):
            await asyncio.sleep(float(turn["delay_s"]))
        text = _turn_text(turn)
        if self.tokenizer is None:
            return Generation(text=text, finish_reason="stop", weight_version=self.weight_version)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        finish = "stop"
        if len(ids) >= params.max_tokens:
            ids, finish = ids[: params.max_tokens], "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
        else:
            ids = ids + [self.tokenizer.eos_token_id]
        return Generation(
            text=text,
            finish_reason=finish,
            prompt_ids=prompt_ids,
            token_ids=ids,
            log_probs=[0.0] * len(ids),
            weight_version=self.weight_version,
        )

    async def generate_stream(
        self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext
    ) -> AsyncIterator[str | Generation]:
        """The whole turn's text as one delta (it is instant), then the Generation."""
        gen = await self.generate(prompt_ids, params, ctx)
        if gen.text:
            yield gen.text
        yield gen

    async def aclose(self) -> None:
        return None
