"""Constrained decoding over a tokenizer: which tokens keep the output a valid prefix of a JSON
document matching the requested schema.

A `TokenIndex` is built once per tokenizer: the exact bytes of every token (byte-level BPE tokens
map back through the byte-to-unicode table; SentencePiece pieces through `▁` and `<0xNN>`;
anything else through decoding one token) in a byte trie. A `Constraint` binds one compiled
format to it and caches, per automaton state, the mask of allowed tokens: one walk of the trie
that prunes a branch at its first impossible byte, done once per state (states recur: every byte
of free string content leads to the same one). The end-of-turn tokens are allowed exactly when the
document is complete, and are then the only choice once nothing can follow, so the model stops.

A `Guide` is one generation's position in its constraint. The engine masks each step's logits
with it before sampling, so the reported log-probs are those of the constrained distribution the
token was drawn from: log_softmax over the allowed tokens of logits / T. Special and added tokens
(chat markup, tool-call tags) are never allowed inside the document."""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from typing import Any

import torch

from rollgate.model_server.structured import JsonFormat, compile_format
from rollgate.model_server.structured_automaton import DEAD, UNKNOWN, Automaton

log = logging.getLogger("rollgate.model_server.structured_tokens")

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _unicode_to_bytes() -> dict[str, int]:
    """Byte-level BPE writes each byte as a printable character: the printable Latin-1 bytes as
    themselves, the others as code points from 256 up, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shift)] = b
            shift += 1
    return table


def _decoder_kinds(tokenizer: Any) -> set[str]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return set()
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    parts = decoder.get("decoders") or [decoder]
    return {p.get("type", "") for p in parts if isinstance(p, dict)}


def token_bytes(tokenizer: Any) -> list[bytes | None]:
    """Each token id's exact bytes; None for special and added tokens (never part of a document)."""
    n = len(tokenizer)
    added = set(getattr(tokenizer, "added_tokens_decoder", {}) or {}) | set(tokenizer.all_special_ids)
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    kinds = _decoder_kinds(tokenizer)
    out: list[bytes | None] = []
    if "ByteLevel" in kinds:
        table = _unicode_to_bytes()
        for i, piece in enumerate(pieces):
            ok = i not in added and piece and all(c in table for c in piece)
            out.append(bytes(table[c] for c in piece) if ok else None)
        return out
    for i, piece in enumerate(pieces):
        if i in added or not piece:
            out.append(None)
        elif "ByteFallback" in kinds and (m := _BYTE_PIECE.match(piece)):
            out.append(bytes((int(m.group(1), 16),)))
        elif "Replace" in kinds or "Metaspace" in kinds:
            out.append(piece.replace("\u2581", " ").encode())
        else:  # unknown scheme: trust single-token decoding, unless it splits a character
            text = tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            out.append(None if "\ufffd" in text or not text else text.encode())
    return out


class TokenIndex:
    """The token bytes and byte trie of one tokenizer, plus the constraints bound to it (the
    newest `max_formats` formats, so repeated schemas reuse their masks)."""

    def __init__(self, tokenizer: Any, eos_ids: set[int], *, max_formats: int = 32):
        self.token_bytes = token_bytes(tokenizer)
        self.eos_ids = sorted(eos_ids)
        self.max_formats = max_formats
        self._constraints: OrderedDict[str, Constraint] = OrderedDict()
        # trie node: (token ids ending here, [(byte, child node), ...])
        root: dict[str, Any] = {"ids": [], "kids": {}}
        for tid, data in enumerate(self.token_bytes):
            if not data:
                continue
            node = root
            for b in data:
                node = node["kids"].setdefault(b, {"ids": [], "kids": {}})
            node["ids"].append(tid)

        def freeze(node: dict[str, Any]) -> tuple:
            return (tuple(node["ids"]), tuple((b, freeze(k)) for b, k in sorted(node["kids"].items())))

        self.trie = freeze(root)

    def constraint(self, fmt: JsonFormat) -> Constraint:
        """The format's constraint (compiled on first use: a 400 for what cannot be enforced)."""
        key = fmt.key
        found = self._constraints.get(key)
        if found is None:
            found = self._constraints[key] = Constraint(Automaton(compile_format(fmt)), self)
            while len(self._constraints) > self.max_formats:
                self._constraints.popitem(last=False)
        self._constraints.move_to_end(key)
        return found

    def guide(self, fmt: JsonFormat) -> Guide:
        return Guide(self.constraint(fmt))


class Constraint:
    """One format over one tokenizer: allowed-token masks per automaton state, computed once (the
    newest `max_masks` are kept: a mask is one bool per vocabulary entry)."""

    def __init__(self, automaton: Automaton, index: TokenIndex, *, max_masks: int = 2048):
        self.automaton = automaton
        self.index = index
        self.max_masks = max_masks
        self._masks: dict[tuple[int, int, str], torch.Tensor] = {}  # (state, vocab, device) -> blocked

    def allowed(self, sid: int) -> list[int]:
        """Token ids allowed in state `sid`, ascending (computed, not cached: see `blocked`)."""
        auto, rows = self.automaton, self.automaton.rows
        ids: list[int] = []
        todo = [(self.index.trie, sid)]
        while todo:
            (ending, kids), state = todo.pop()
            ids.extend(ending)
            row = rows[state]
            for b, child in kids:
                t = row[b]
                if t == UNKNOWN:
                    t = auto.next(state, b)
                if t >= 0:
                    todo.append((child, t))
        if auto.accepting[sid]:
            ids.extend(self.index.eos_ids)
        ids.sort()
        return ids

    def blocked(self, sid: int, vocab: int, device: torch.device) -> torch.Tensor:
        """A boolean mask over the logits: True where a token is not allowed."""
        key = (sid, vocab, str(device))
        mask = self._masks.get(key)
        if mask is None:
            ids = [t for t in self.allowed(sid) if t < vocab]
            if not ids:  # cannot happen for a compiled schema; end the generation rather than fail the batch
                log.error("no token continues the structured output; ending it")
                ids = [t for t in self.index.eos_ids if t < vocab]
            mask = torch.ones(vocab, dtype=torch.bool)
            mask[ids] = False
            mask = self._masks[key] = mask.to(device)
            if len(self._masks) > self.max_masks:
                del self._masks[next(iter(self._masks))]
        return mask

    def walk(self, sid: int, token: int) -> int:
        data = self.index.token_bytes[token] if token < len(self.index.token_bytes) else None
        return self.automaton.feed(sid, data) if data else DEAD


class Guide:
    """One generation's position in a constraint (used by the engine thread only)."""

    def __init__(self, constraint: Constraint):
        self.constraint = constraint
        self.eos_ids = constraint.index.eos_ids
        self.state = constraint.automaton.start

    def constrain(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits with every token that would break the document set to -inf."""
        if self.state < 0:
            return logits
        return logits.masked_fill(self.constraint.blocked(self.state, logits.shape[-1], logits.device), float("-inf"))

    def advance(self, token: int) -> None:
        if token in self.constraint.index.eos_ids:
            self.state = DEAD  # the document is complete
            return
        self.state = self.constraint.walk(self.state, token)

    @property
    def ended(self) -> bool:
        """After the end of turn (or a token the constraint refused)."""
        return self.state < 0

    @property
    def complete(self) -> bool:
        return self.state >= 0 and self.constraint.automaton.accepting[self.state]


class ToolCallGuide:
    """A forced tool call (toolcalls.ToolCallConstraint): the prefix ids one by one, then the call's
    JSON document (`document`: a fresh Guide, or structured_llg.LlgGuide), then the suffix ids, then
    the end of turn. Each forced token is the only one allowed, so its log-prob under the
    constrained distribution is 0."""

    def __init__(self, document: Any, prefix: tuple[int, ...], suffix: tuple[int, ...]):
        self.json = document
        self.forced = list(prefix)  # ids still to force before the document
        self.suffix = list(suffix)
        self.in_document = not self.forced
        self._masks: dict[tuple[int, int, str], torch.Tensor] = {}

    def _only(self, tokens: list[int], vocab: int, device: torch.device) -> torch.Tensor:
        key = (tokens[0] if len(tokens) == 1 else -len(tokens), vocab, str(device))
        mask = self._masks.get(key)
        if mask is None:
            mask = torch.ones(vocab, dtype=torch.bool)
            mask[[t for t in tokens if t < vocab]] = False
            mask = self._masks[key] = mask.to(device)
        return mask

    def constrain(self, logits: torch.Tensor) -> torch.Tensor:
        vocab, device = logits.shape[-1], logits.device
        if not self.in_document:
            nxt = self.forced[:1] or self.json.eos_ids
            return logits.masked_fill(self._only(nxt, vocab, device), float("-inf"))
        if self.json.complete and self.suffix:
            # the document is whole (nothing can follow its closing brace): the suffix comes next
            return logits.masked_fill(self._only(self.suffix[:1], vocab, device), float("-inf"))
        return self.json.constrain(logits)

    def advance(self, token: int) -> None:
        if not self.in_document:
            if self.forced:
                self.forced.pop(0)
                self.in_document = not self.forced and not self.json.ended and not self.json.complete
            return
        if self.json.complete:  # the first suffix token: force the rest, then the end of turn
            self.forced, self.suffix, self.in_document = self.suffix[1:], [], False
            return
        self.json.advance(token)
