"""Constrained decoding with llguidance (`model.guide_backend: llguidance`, the `guides` extra):
the JSON-schema compiler and token-mask engine of vLLM's `guidance` structured-output backend,
behind the same interface as structured_tokens (an index per tokenizer, a guide per generation
with `constrain` and `advance`), so the local backend enforces the schemas vLLM does.

It compiles more of JSON Schema than structured.py (pattern, format, minimum/maximum and their
exclusive forms, multipleOf, oneOf, allOf, minProperties, prefixItems, patternProperties, $ref
anywhere; benchmarks/bench_guides.py measures which), and what it cannot enforce (`not`,
`uniqueItems`, `if`/`then`/`else`, ...) is still a 400 naming the keyword: nothing is ignored.
Documents are compact JSON (no whitespace between tokens) and integers without bounds have at most
16 digits, as with the native guide, so a model cannot stall in blanks or digits (fractions are not
capped: llguidance has no such limit).
The end-of-turn tokens are allowed exactly when the document is complete, as in the native guide."""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from rollgate.core.errors import BadRequest
from rollgate.model_server.structured import COMPONENT, JsonFormat

log = logging.getLogger("rollgate.model_server.structured_llg")

# The options vLLM's guidance backend passes, less its flexible whitespace (see the docstring).
OPTIONS = {"whitespace_flexible": False}
_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[([^\]]*)\]")
# Integers without bounds get the native guide's digit cap (structured_automaton.MAX_INT_DIGITS),
# so a model cannot write digits until max_output_tokens runs out.
INT_LIMIT = 10**16 - 1
_DATA = frozenset({"enum", "const", "default", "examples"})  # values, not schemas


def _capped(schema: Any) -> Any:
    """A copy of `schema` whose unbounded integers are bounded to INT_LIMIT digits."""
    if isinstance(schema, list):
        return [_capped(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in _DATA else _capped(v) for k, v in schema.items()}
    if out.get("type") == "integer":
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -INT_LIMIT
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = INT_LIMIT
    return out


def unpack_bitmask(bitmask: torch.Tensor, n: int) -> torch.Tensor:
    """A bitmask row (bit i of word i // 32 set: token i allowed) as n bools."""
    bits = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:n]
    return torch.from_numpy(bits.view(np.bool_))


def _where(schema: Any, key: str, path: str) -> str | None:
    """The path of the first place `key` is a keyword of `schema` (depth first)."""
    if isinstance(schema, dict):
        if key in schema:
            return f"{path}.{key}"
        items = schema.items()
    elif isinstance(schema, list):
        items = ((f"[{i}]", v) for i, v in enumerate(schema))  # type: ignore[assignment]
    else:
        return None
    for k, v in items:
        found = _where(v, key, path + (k if k.startswith("[") else f".{k}"))
        if found:
            return found
    return None


def _refusal(fmt: JsonFormat, message: str) -> BadRequest:
    """A 400 for a schema llguidance cannot enforce, naming the keyword's place where it can."""
    field, first = fmt.schema_field, message.strip().splitlines()[0] if message.strip() else message
    m = _UNIMPLEMENTED.search(message)
    if m and fmt.schema is not None:
        keys = [k.strip().strip('"') for k in m.group(1).split(",") if k.strip()]
        if keys:
            field = _where(fmt.schema, keys[0], fmt.schema_field) or field
    why = f"{first}; this server's constrained decoding (llguidance) cannot enforce it: leave it out"
    return BadRequest(f"{field}: {why}", component=COMPONENT, field=field)


class LlgIndex:
    """llguidance's view of one tokenizer, plus the newest `max_formats` compiled grammars."""

    def __init__(self, tokenizer: Any, eos_ids: set[int], *, max_formats: int = 32):
        import llguidance
        import llguidance.hf

        self.llg = llguidance
        self.eos_ids = sorted(eos_ids)
        self.vocab = len(tokenizer)
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.vocab, eos_token=self.eos_ids)
        self.max_formats = max_formats
        self._grammars: OrderedDict[str, str] = OrderedDict()

    def constraint(self, fmt: JsonFormat) -> str:
        """The format's grammar (compiled on first use: a 400 for what cannot be enforced)."""
        key = fmt.key
        found = self._grammars.get(key)
        if found is None:
            schema = _capped(fmt.schema) if fmt.kind == "json_schema" else {"type": "object"}
            try:
                grammar = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=OPTIONS)
            except ValueError as exc:
                raise _refusal(fmt, str(exc)) from None
            error = self.llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
            if error:
                raise _refusal(fmt, error)
            found = self._grammars[key] = grammar
            while len(self._grammars) > self.max_formats:
                self._grammars.popitem(last=False)
        self._grammars.move_to_end(key)
        return found

    def guide(self, fmt: JsonFormat) -> LlgGuide:
        return LlgGuide(self, self.constraint(fmt))


class LlgGuide:
    """One generation's matcher (used by the engine thread only)."""

    def __init__(self, index: LlgIndex, grammar: str):
        import llguidance.torch

        self.index = index
        self.eos_ids = index.eos_ids
        self.matcher = index.llg.LLMatcher(index.tokenizer, grammar, log_level=0)
        self._fill = llguidance.torch.fill_next_token_bitmask
        self.bitmask = llguidance.torch.allocate_token_bitmask(1, index.vocab)
        self.ended = self.matcher.is_error()
        if self.ended:
            log.error("llguidance could not start the grammar: %s", self.matcher.get_error())

    def constrain(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits with every token that would break the document set to -inf."""
        if self.ended:
            return logits
        self._fill(self.matcher, self.bitmask, 0)
        vocab = logits.shape[-1]
        allowed = unpack_bitmask(self.bitmask[0], min(vocab, self.index.vocab))
        if self.matcher.is_error() or not allowed.any():  # cannot happen for a compiled schema
            log.error("no token continues the structured output (%s); ending it", self.matcher.get_error())
            allowed = torch.zeros(vocab, dtype=torch.bool)
            allowed[[t for t in self.eos_ids if t < vocab]] = True
        elif allowed.shape[0] < vocab:  # padded embedding rows are not tokens
            allowed = torch.cat([allowed, torch.zeros(vocab - allowed.shape[0], dtype=torch.bool)])
        return logits.masked_fill(~allowed.to(logits.device), float("-inf"))

    def advance(self, token: int) -> None:
        if token in self.eos_ids:
            self.ended = True  # the document is complete
            return
        if not self.matcher.consume_token(token):
            log.error("llguidance refused token %d: %s", token, self.matcher.get_error())
            self.ended = True

    @property
    def complete(self) -> bool:
        return not self.ended and self.matcher.is_accepting()
