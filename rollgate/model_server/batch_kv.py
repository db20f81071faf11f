"""The running batch's keys and values for the local engine (engine.py), kept in buffers with room
to grow, so that a decode step writes its one new column in place.

Why: transformers' DynamicCache grows by concatenation. Handed the batch's cache each step, it
copies every layer's keys and values twice (once to take them in, once to append the step's
column): for 64 rows of ~500 tokens of SmolLM2 that is ~3 GB of memory traffic a token, and
profiling an evaluation showed the copies, with the batch's compaction when rows finish, taking
more time than the model's matrix products.

Layout: per layer one key and one value buffer, [row capacity, heads, column capacity, head_dim],
zero-filled when allocated. The batch is rows [0, n) and columns [start, end) of them; rows are
left padded (their attention mask hides the padding, whose stale values are finite and so
weighted 0). Decoding writes column `end`; a row that leaves the batch is replaced by the last
row (one row copied, not the whole batch); rows that join are written below the others; columns
no row needs any more are dropped by moving `start`. Only when a buffer has no room left is it
reallocated (right-sized, with headroom) and the batch copied once.

Only the engine thread uses it."""

from __future__ import annotations

import functools
from typing import Any

import torch

from rollgate.model_server.kv_cache import LayerKV

RIGHT_ROOM = 64  # decode steps between reallocations
LEFT_ROOM = 32  # columns kept free for joining rows longer than the batch


@functools.cache
def _in_place_layer() -> type:
    from transformers.cache_utils import DynamicLayer

    class InPlaceLayer(DynamicLayer):
        """A cache layer whose update writes the step's keys and values into the batch's buffers
        at column `end` and answers views of the batch up to them (no copy)."""

        def __init__(self, store: BatchKV, index: int):
            super().__init__()
            self.store, self.index = store, index
            self.keys, self.values = store.views(index)
            self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            store = self.store
            kb, vb = store.buffers[self.index]
            n, at, stop = store.n, store.end, store.end + key_states.shape[-2]
            kb[:n, :, at:stop] = key_states
            vb[:n, :, at:stop] = value_states
            self.keys, self.values = kb[:n, :, store.start : stop], vb[:n, :, store.start : stop]
            return self.keys, self.values

    return InPlaceLayer


class BatchKV:
    def __init__(self, cache: LayerKV, mask: torch.Tensor, *, max_rows: int):
        self.max_rows = max_rows
        self.buffers: LayerKV = []
        self.n = self.start = self.end = 0
        rows, wide = mask.shape
        self._reallocate(cache, rows=rows, width=wide, left=0)
        self._write(cache, 0, self.end)
        self.n, self.mask = rows, mask

    @property
    def width(self) -> int:
        return self.end - self.start

    def views(self, layer: int | None = None) -> Any:
        """The batch's keys and values (all layers, or one layer's pair): views of the buffers."""
        if layer is not None:
            k, v = self.buffers[layer]
            return k[: self.n, :, self.start : self.end], v[: self.n, :, self.start : self.end]
        return [self.views(i) for i in range(len(self.buffers))]

    # ---- a decode step ---------------------------------------------------------------------------
    def step_cache(self) -> Any:
        """A DynamicCache over the batch whose layers append this step's column in place; call
        `stepped` with the step's mask after the forward."""
        from transformers import DynamicCache

        if self.end + 1 > self.buffers[0][0].shape[2]:
            self._reallocate(self.views(), rows=self.n, width=self.width, left=0)
        cache = DynamicCache()
        layer = _in_place_layer()
        cache.layers = [layer(self, i) for i in range(len(self.buffers))]
        return cache

    def stepped(self, mask: torch.Tensor) -> None:
        self.end += 1
        self.mask = mask

    # ---- rows joining and leaving ----------------------------------------------------------------
    def append(self, cache: LayerKV, mask: torch.Tensor) -> None:
        """Rows joining the batch, below the running ones, right-aligned with them: the narrower
        side is padded on the left."""
        m, wide = mask.shape
        grow = max(0, wide - self.width)
        if self.n + m > self.buffers[0][0].shape[0] or grow > self.start:
            self._reallocate(self.views(), rows=self.n + m, width=self.width, left=grow)
        if grow:
            self.start -= grow
            self.mask = torch.nn.functional.pad(self.mask, (grow, 0), value=0)
        self._write(cache, self.n, self.end)
        if wide < self.width:
            mask = torch.nn.functional.pad(mask, (self.width - wide, 0), value=0)
        self.n += m
        self.mask = torch.cat([self.mask, mask])

    def keep(self, rows: list[int]) -> list[int]:
        """Keep these rows (ascending indices) and drop the others: a dropped row below the kept
        count is replaced by a kept row from past it, so only those rows are copied. Answers the
        old index of the row now in each place; then drops the columns no row left needs."""
        count = len(rows)
        kept = set(rows)
        holes = [i for i in range(count) if i not in kept]
        movers = [i for i in rows if i >= count]
        order = list(range(count))
        if holes:
            device = self.mask.device
            to, src = torch.tensor(holes, device=device), torch.tensor(movers, device=device)
            for kb, vb in self.buffers:
                kb[to, :, self.start : self.end] = kb[src, :, self.start : self.end]
                vb[to, :, self.start : self.end] = vb[src, :, self.start : self.end]
            self.mask[to] = self.mask[src]
            for h, s in zip(holes, movers, strict=True):
                order[h] = s
        self.n = count
        mask = self.mask[:count]
        first = int(mask.any(0).nonzero()[0])
        self.start += first
        self.mask = mask[:, first:]
        return order

    # ---- storage ---------------------------------------------------------------------------------
    def _write(self, cache: LayerKV, row: int, end: int) -> None:
        """`cache`'s rows from `row` on, their columns ending at `end`."""
        for (kb, vb), (k, v) in zip(self.buffers, cache, strict=True):
            rows, wide = k.shape[0], k.shape[2]
            kb[row : row + rows, :, end - wide : end] = k
            vb[row : row + rows, :, end - wide : end] = v

    def _reallocate(self, cache: LayerKV, *, rows: int, width: int, left: int) -> None:
        """New buffers with room for `rows` rows (doubling, up to max_rows), `width` columns after
        `left` + LEFT_ROOM free ones and RIGHT_ROOM free after them; the running rows (`cache`, if
        any) copied into place."""
        have = self.buffers[0][0].shape[0] if self.buffers else 0
        cap_rows = have if rows <= have else max(rows, min(2 * have, self.max_rows))
        start = left + LEFT_ROOM
        cap_cols = start + width + RIGHT_ROOM
        fresh = []
        for k, v in cache:
            kb = k.new_zeros((cap_rows, k.shape[1], cap_cols, k.shape[3]))
            vb = v.new_zeros((cap_rows, v.shape[1], cap_cols, v.shape[3]))
            if self.n:
                kb[: self.n, :, start : start + width] = k
                vb[: self.n, :, start : start + width] = v
            fresh.append((kb, vb))
        self.buffers = fresh
        self.start, self.end = start, start + width
