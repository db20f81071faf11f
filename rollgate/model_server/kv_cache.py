"""A bounded prefix cache of attention keys and values for the local engine (engine.py).

Why: an agent's next call extends its previous call's exact token ids (token-in/token-out, see
chat.py), and the samples of a GRPO group share one prompt. Prefilling only the tokens past the
longest cached prefix makes a turn cost its new tail instead of its whole history.

An entry is the KV of one token sequence: a prompt right after its prefill (so the samples of a
group that arrive later share it), or a finished sequence (its prompt plus the tokens fed back
while decoding, i.e. all but the last sampled one). A sequence that extends an entry replaces it
(the longer entry serves every prompt the shorter one did), so a session keeps one entry.

Lookup finds the entry sharing the longest token prefix with a prompt through chained hashes of
fixed-size blocks, then compares the ids themselves: a hash collision never returns wrong KV.
Memory is bounded by a byte budget with least-recently-used eviction. `invalidate()` (a weight
update) drops every entry and starts a new epoch; KV computed under older weights (a row that was
decoding across the update) is refused when it is offered later.

Only the engine thread calls it, while holding the engine's weights lock; so does a weight update."""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rollgate.core.tokens import common_prefix

LayerKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [heads, tokens, head_dim]


@dataclass
class _Entry:
    ids: array
    hashes: list[int]
    kv: LayerKV
    nbytes: int


@dataclass(frozen=True)
class Hit:
    """`length` tokens of `entry`'s KV to reuse (views, [heads, length, head_dim] per layer).
    `whole`: the entire entry is a prefix of the prompt, so the new sequence supersedes it."""

    entry: int
    length: int
    whole: bool
    kv: LayerKV


def block_hashes(ids: Sequence[int], block: int) -> list[int]:
    """hashes[j] identifies ids[: (j + 1) * block] (each hash chains the previous one)."""
    out: list[int] = []
    h = 0
    for start in range(0, len(ids) - block + 1, block):
        h = hash((h, tuple(ids[start : start + block])))
        out.append(h)
    return out


def shared_prefixes(prompts: Sequence[Sequence[int]], min_len: int) -> list[list[int]]:
    """The longest prefix each group of `prompts` shares, for groups of two or more prompts whose
    shared prefix is at least `min_len` tokens (found by sorting: neighbours share the most), each
    shorter than every prompt of its group (a prompt's last token is always computed)."""
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    out: list[list[int]] = []
    group, shared = [order[0]] if order else [], 0
    for a, b in zip(order, order[1:], strict=False):
        n = common_prefix((prompts[a], prompts[b]))
        if n >= min_len:
            shared = min(shared, n) if len(group) > 1 else n
            group.append(b)
            continue
        out += _group_prefix(prompts, group, shared, min_len)
        group, shared = [b], 0
    return out + _group_prefix(prompts, group, shared, min_len)


def _group_prefix(prompts: Sequence[Sequence[int]], group: list[int], shared: int, min_len: int) -> list[list[int]]:
    if len(group) < 2:
        return []
    n = min(shared, min(len(prompts[i]) for i in group) - 1)
    return [list(prompts[group[0]][:n])] if n >= min_len else []


def kv_nbytes(kv: LayerKV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


class PrefixKVCache:
    def __init__(self, budget_bytes: int, *, block: int = 16, min_tokens: int = 16, max_candidates: int = 16):
        if budget_bytes < 0:
            raise ValueError("kv cache budget must be >= 0 bytes")
        self.budget = budget_bytes
        self.block = block
        self.min_tokens = max(min_tokens, 1)  # a shorter shared prefix is not worth a separate prefill
        self.max_candidates = max_candidates
        self.epoch = 0
        self.nbytes = 0
        self.stats = {
            "hits": 0,
            "misses": 0,
            "stored": 0,
            "evicted": 0,
            "refused": 0,
            "invalidated": 0,
            "shared_prefixes": 0,  # prefill_shared: how many prefixes, and their tokens
            "shared_prefix_tokens": 0,
        }
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._index: dict[int, dict[int, None]] = {}  # block hash -> entry keys (insertion ordered)
        self._next = 0

    def __len__(self) -> int:
        return len(self._entries)

    # ---- lookup ---------------------------------------------------------------------------------
    def lookup(self, prompt: Sequence[int], *, count: bool = True) -> Hit | None:
        """The longest reusable cached prefix of `prompt`, or None. At least the prompt's last
        token is left to compute: its logits give the first generated token."""
        hit = self._find(prompt)
        if count:
            self.stats["hits" if hit is not None else "misses"] += 1
        return hit

    def _find(self, prompt: Sequence[int]) -> Hit | None:
        limit = len(prompt) - 1
        if limit < self.min_tokens or not self._entries:
            return None
        hashes = block_hashes(prompt, self.block)
        for j in range(len(hashes) - 1, -1, -1):
            keys = self._index.get(hashes[j])
            if not keys:
                continue
            hit = self._best(prompt, (j + 1) * self.block, list(keys)[-self.max_candidates :], limit)
            if hit is not None:
                self._entries.move_to_end(hit.entry)
                return hit
        return None

    def prefill_shared(
        self, prompts: Sequence[Sequence[int]], compute: Callable[[list[int], Hit | None], LayerKV]
    ) -> int:
        """Compute once (`compute(prefix, cached part)`) and keep each prefix that several of
        `prompts` share (shared_prefixes) and the cache does not hold yet (past a block): it then
        serves every prompt of a batch that arrives together, as a kept prompt serves those that
        arrive later. How many were computed."""
        done = 0
        for prefix in shared_prefixes(prompts, max(self.min_tokens, 2 * self.block)):
            hit = self._find(prefix)
            if hit is None or hit.length + self.block < len(prefix):
                self.put(prefix, compute(prefix, hit), epoch=self.epoch)
                self.stats["shared_prefix_tokens"] += len(prefix) - (hit.length if hit is not None else 0)
                done += 1
        self.stats["shared_prefixes"] += done
        return done

    def _best(self, prompt: Sequence[int], start: int, keys: list[int], limit: int) -> Hit | None:
        scored = []
        for key in keys:  # extend the shared prefix past the matched block, token by token
            ids = self._entries[key].ids
            n, end = start, min(len(ids), len(prompt))
            while n < end and ids[n] == prompt[n]:
                n += 1
            scored.append((n, key))
        head = None
        for n, key in sorted(scored, reverse=True):
            entry = self._entries[key]
            if head is None:
                head = array("q", prompt[:start])
            if entry.ids[:start] != head:  # a hash collision: never trust KV on a hash alone
                continue
            use = min(n, limit)
            if use < self.min_tokens:
                return None
            kv = [(k[:, :use], v[:, :use]) for k, v in entry.kv]
            return Hit(key, use, use == len(entry.ids), kv)
        return None

    # ---- storing --------------------------------------------------------------------------------
    def put(self, ids: Sequence[int], kv: LayerKV, *, epoch: int, replaces: int | None = None) -> int | None:
        """Keep `kv` (owned by the cache from now on: pass copies, not views of a batch) for `ids`;
        `replaces` is an entry the new one extends. Returns the new entry's key, or None when it is
        not kept (computed before an invalidation, too short, or larger than the whole budget)."""
        length = int(kv[0][0].shape[1]) if kv else 0
        if length != len(ids):
            raise ValueError(f"kv holds {length} tokens for {len(ids)} ids")
        nbytes = kv_nbytes(kv) + 8 * len(ids)
        if epoch != self.epoch or len(ids) < self.min_tokens or nbytes > self.budget:
            self.stats["refused"] += 1
            return None
        if replaces is not None:
            self._drop(replaces)
        while self._entries and self.nbytes + nbytes > self.budget:
            self._drop(next(iter(self._entries)))
            self.stats["evicted"] += 1
        key, self._next = self._next, self._next + 1
        entry = _Entry(array("q", ids), block_hashes(ids, self.block), kv, nbytes)
        self._entries[key] = entry
        for h in entry.hashes:
            self._index.setdefault(h, {})[key] = None
        self.nbytes += nbytes
        self.stats["stored"] += 1
        return key

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return  # already evicted or replaced
        self.nbytes -= entry.nbytes
        for h in entry.hashes:
            keys = self._index.get(h)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._index[h]

    def invalidate(self) -> None:
        """Drop everything (the weights changed); KV offered from an older epoch is refused."""
        self._entries.clear()
        self._index.clear()
        self.nbytes = 0
        self.epoch += 1
        self.stats["invalidated"] += 1


# ---- batch layout helpers (the engine's cache: per layer [rows, heads, columns, head_dim]) ---------
def row_kv(cache: LayerKV, mask_row: torch.Tensor, row: int) -> LayerKV:
    """Copies of one row's keys and values at the columns its mask marks (its tokens, in order)."""
    cols = mask_row.nonzero().squeeze(-1)
    first, n = int(cols[0]), int(cols.numel())
    if int(cols[-1]) - first + 1 == n:  # contiguous: a slice, copied so the batch can be freed
        return [(k[row, :, first : first + n].clone(), v[row, :, first : first + n].clone()) for k, v in cache]
    return [(k[row].index_select(1, cols), v[row].index_select(1, cols)) for k, v in cache]


def stack_prefixes(prefixes: Sequence[LayerKV | None], width: int) -> LayerKV:
    """A batch cache of `width` columns holding each row's prefix right-aligned (zeros to its left,
    masked out by the caller's attention mask). A None prefix is an all-padding row."""
    some = next(p for p in prefixes if p)
    out: LayerKV = []
    for layer, (k0, v0) in enumerate(some):
        heads, dim = k0.shape[0], k0.shape[2]
        k = k0.new_zeros((len(prefixes), heads, width, dim))
        v = v0.new_zeros((len(prefixes), v0.shape[0], width, v0.shape[2]))
        for i, p in enumerate(prefixes):
            if p:
                n = p[layer][0].shape[1]
                k[i, :, width - n :] = p[layer][0]
                v[i, :, width - n :] = p[layer][1]
        out.append((k, v))
    return out


def cat_left_padded(a: LayerKV, mask_a: torch.Tensor, b: LayerKV, mask_b: torch.Tensor) -> tuple[LayerKV, torch.Tensor]:
    """Rows of `a` then rows of `b`, the narrower side padded on the left to the common width."""
    wa, wb = mask_a.shape[1], mask_b.shape[1]
    width = max(wa, wb)

    def pad(t: torch.Tensor, n: int) -> torch.Tensor:  # left-pad the sequence dim (-2 for kv, -1 mask)
        if n == 0:
            return t
        if t.dim() == 2:
            return torch.nn.functional.pad(t, (n, 0), value=0)
        return torch.nn.functional.pad(t, (0, 0, n, 0), value=0.0)

    cache = [
        (torch.cat([pad(k0, width - wa), pad(k1, width - wb)]), torch.cat([pad(v0, width - wa), pad(v1, width - wb)]))
        for (k0, v0), (k1, v1) in zip(a, b, strict=True)
    ]
    return cache, torch.cat([pad(mask_a, width - wa), pad(mask_b, width - wb)])
