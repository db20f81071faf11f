"""The engine's running-batch KV store (batch_kv.BatchKV) holds exactly what the plain layout it
replaced holds (a tensor per layer grown by concatenation, rows dropped by index_select, joining
rows left padded to a common width), through random joins, decode steps past its reallocation
points and rows leaving from anywhere; and the engine decodes rows of mixed lengths that join and
leave at different steps exactly as it decodes each alone (test_batching.py)."""

from __future__ import annotations

import random

import pytest
import torch

from rollgate.model_server.batch_kv import RIGHT_ROOM, BatchKV
from rollgate.model_server.kv_cache import cat_left_padded

LAYERS, HEADS, DIM = 3, 2, 4


def _rows(rng: random.Random, n: int, width: int) -> tuple[list, torch.Tensor]:
    """n new rows of `width` columns, each with its own number of real (right-aligned) tokens."""
    cache = [(torch.randn(n, HEADS, width, DIM), torch.randn(n, HEADS, width, DIM)) for _ in range(LAYERS)]
    mask = torch.zeros(n, width, dtype=torch.long)
    for i in range(n):
        mask[i, width - rng.randint(1, width) :] = 1
    return cache, mask


def _step(n: int) -> list:
    return [(torch.randn(n, HEADS, 1, DIM), torch.randn(n, HEADS, 1, DIM)) for _ in range(LAYERS)]


def _check(store: BatchKV, ref: list, ref_mask: torch.Tensor, order: list[int]) -> None:
    """The store's rows are the reference's rows in `order`, at every column a row's mask marks."""
    assert store.n == len(order) and store.mask.shape == ref_mask[order].shape
    assert torch.equal(store.mask, ref_mask[order])
    live = store.mask.bool()
    for (k, v), (rk, rv) in zip(store.views(), ref, strict=True):
        assert k.shape == rk[order].shape
        assert torch.equal(k.permute(0, 2, 1, 3)[live], rk[order].permute(0, 2, 1, 3)[live])
        assert torch.equal(v.permute(0, 2, 1, 3)[live], rv[order].permute(0, 2, 1, 3)[live])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_store_matches_the_concatenating_layout_through_joins_steps_and_departures(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    cache, mask = _rows(rng, 3, 10)
    store = BatchKV(cache, mask, max_rows=16)
    ref, ref_mask, order = cache, mask, [0, 1, 2]  # order: the reference row in each store place
    reallocations = 0
    for _ in range(300):
        before = store.buffers[0][0].data_ptr()
        move = rng.random()
        if move < 0.12 and store.n < 12:  # rows join, sometimes wider than the batch
            new, new_mask = _rows(rng, rng.randint(1, 3), rng.randint(2, store.width + 40))
            store.append(new, new_mask)
            start = ref_mask.shape[0]
            ref, ref_mask = cat_left_padded(ref, ref_mask, new, new_mask)
            order += list(range(start, start + new_mask.shape[0]))
        elif move < 0.24 and store.n > 1:  # some rows leave
            keep = sorted(rng.sample(range(store.n), rng.randint(1, store.n - 1)))
            moved = store.keep(keep)
            order = [order[i] for i in moved]
            idx = torch.tensor(sorted(order))  # the reference drops the same rows, keeps its order
            remap = {old: new for new, old in enumerate(sorted(order))}
            ref = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in ref]
            first = int(ref_mask.index_select(0, idx).any(0).nonzero()[0])
            ref_mask = ref_mask.index_select(0, idx)[:, first:]
            ref = [(k[:, :, first:], v[:, :, first:]) for k, v in ref]
            order = [remap[o] for o in order]
        else:  # a decode step: every layer appends one column
            step = _step(store.n)
            cache_obj = store.step_cache()
            for i, (k, v) in enumerate(step):
                out_k, _ = cache_obj.update(k[torch.tensor(order)], v[torch.tensor(order)], i)
                assert out_k.shape[2] == store.width + 1
            mask_next = torch.cat([store.mask, torch.ones(store.n, 1, dtype=torch.long)], 1)
            store.stepped(mask_next)
            ref = [(torch.cat([rk, k], 2), torch.cat([rv, v], 2)) for (rk, rv), (k, v) in zip(ref, step, strict=True)]
            ref_mask = torch.cat([ref_mask, torch.ones(ref_mask.shape[0], 1, dtype=torch.long)], 1)
        reallocations += store.buffers[0][0].data_ptr() != before
        _check(store, ref, ref_mask, order)
    assert reallocations < 60  # most moves wrote in place


def test_decoding_writes_in_place_until_the_room_runs_out():
    rng = random.Random(0)
    cache, mask = _rows(rng, 4, 8)
    store = BatchKV(cache, mask, max_rows=8)
    buffer = store.buffers[0][0].data_ptr()
    for step in range(RIGHT_ROOM + 1):
        layers = store.step_cache()
        for i in range(LAYERS):
            layers.update(torch.randn(4, HEADS, 1, DIM), torch.randn(4, HEADS, 1, DIM), i)
        store.stepped(torch.cat([store.mask, torch.ones(4, 1, dtype=torch.long)], 1))
        assert (store.buffers[0][0].data_ptr() == buffer) == (step < RIGHT_ROOM), step
    assert store.width == 8 + RIGHT_ROOM + 1
