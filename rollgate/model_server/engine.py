"""A continuous-batching decode engine for a transformers causal LM, on one dedicated thread.

Iteration-level batching: requests that arrive while a batch is decoding are prefilled and join
the running batch at the next decode step; finished sequences leave at once. Sequences are left
padded; attention masks and per-row position ids keep padding invisible; one shared KV cache
holds every running row (rows joining are padded on the left to the batch's length; columns no
row needs any more are trimmed), in buffers with room to grow, so a decode step writes its new
column in place (batch_kv.BatchKV). Each row samples with its own temperature / top_p / seed.
A streaming row hands each sampled token to its caller's loop as it is decoded; a row whose
future is cancelled (the caller went away) leaves the batch at the next step.

Log-probs are those of each sampled token under the temperature-scaled distribution
(log_softmax(logits / T)), before top-p truncation: what TRL recomputes. At temperature 0
(greedy) they are under the unscaled distribution. A row with a structured-output guide
(structured_tokens.Guide) has its logits masked to the allowed tokens first, so its log-probs are
those of that constrained distribution: the one the token was sampled from.

Prefix KV reuse (kv_cache.PrefixKVCache, when the engine is given one): a row whose prompt starts
with a cached sequence prefills only the rest on top of that KV, so its row in the batch cache is
[padding | cached prefix | padding | new tokens] (the mask hides both paddings; positions count
real tokens only). Rows with identical prompts admitted together are prefilled once and their KV
expanded to every row; a prefix several of them share (a system prompt) is prefilled once first.
Each prompt's KV is kept after its prefill and each finished sequence's when it leaves the batch.
Results match a full prefill up to float rounding (greedy tokens agree, log-probs within ~1e-5)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rollgate.core.hf_compat import cache_kwarg, output_cache
from rollgate.model_server.backend import SamplingParams
from rollgate.model_server.batch_kv import BatchKV
from rollgate.model_server.kv_cache import Hit, PrefixKVCache, cat_left_padded, row_kv, stack_prefixes
from rollgate.model_server.sampling import sample_rows

log = logging.getLogger("rollgate.model_server.engine")
CLOSE_WAIT_S = 300.0  # how long close() waits for a step under way, past its first 10 s


@dataclass
class EngineResult:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    weight_version: str | None


@dataclass
class _Row:
    prompt: list[int]
    params: SamplingParams
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    generator: torch.Generator | None
    tokens: asyncio.Queue | None = None  # streaming: each token, then the EngineResult or exception
    guide: Any = None  # structured output: a structured_tokens.Guide that masks each step's logits
    out: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    finish: str | None = None
    kv_epoch: int = 0  # the prefix cache's epoch at prefill: KV from older weights is never kept
    kv_entry: int | None = None  # the cache entry this row's sequence extends (replaced when it finishes)


class Engine:
    def __init__(
        self,
        model,
        *,
        eos_ids: set[int],
        pad_id: int,
        max_batch_size: int = 64,
        batch_window_ms: float = 5.0,
        observe_batch: Callable[[int], None] | None = None,
        kv_cache_bytes: int | None = None,
    ):
        self.model = model
        self.device = next(model.parameters()).device
        self.eos_ids = eos_ids
        self.pad_id = pad_id
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_ms / 1000.0
        self.observe_batch = observe_batch
        self.weights_lock = threading.Lock()  # held for each step; a trainer holds it to swap weights
        # Set while a weight update waits for the lock: the loop lets it in before its next step
        # (a plain Lock is not fair: the loop would re-take it at once, step after step).
        self.update_waiting = threading.Event()
        self.weight_version: str | None = None
        self.stats = {"steps": 0, "prefills": 0, "max_batch": 0, "joined_running": 0, "cancelled": 0}
        # prefix KV reuse: None turns it off (every prompt is prefilled whole, as before)
        self.kv = PrefixKVCache(kv_cache_bytes) if kv_cache_bytes is not None else None
        self._params = list(model.parameters())  # listed once: walking the modules costs ~0.3 ms
        self._weights_mark = self._weights_version_sum()
        self.stats |= {"prefill_tokens": 0, "reused_tokens": 0, "shared_rows": 0, "prefill_s": 0.0, "decode_s": 0.0}
        self._inbox: queue.Queue[_Row] = queue.Queue()
        self._rows: list[_Row] = []
        self._batch: BatchKV | None = None  # the running rows' keys and values (batch_kv.py)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollgate-engine", daemon=True)
        self._thread.start()

    # ---- called from the event loop -------------------------------------------------------------
    def pending(self) -> int:
        return self._inbox.qsize() + len(self._rows)

    def submit(self, prompt: list[int], params: SamplingParams, guide: Any = None) -> asyncio.Future:
        """The future resolves to an EngineResult; cancelling it drops the row."""
        return self._submit(prompt, params, stream=False, guide=guide).future

    def submit_streaming(
        self, prompt: list[int], params: SamplingParams, guide: Any = None
    ) -> tuple[asyncio.Future, asyncio.Queue]:
        """The queue receives each sampled token id as it is decoded, then the EngineResult (or the
        exception); cancelling the future drops the row."""
        row = self._submit(prompt, params, stream=True, guide=guide)
        assert row.tokens is not None
        return row.future, row.tokens

    def _submit(self, prompt: list[int], params: SamplingParams, *, stream: bool, guide: Any = None) -> _Row:
        loop = asyncio.get_running_loop()
        gen = None
        if params.seed is not None:
            gen = torch.Generator(device="cpu").manual_seed(params.seed)
        row = _Row(list(prompt), params, loop.create_future(), loop, gen, asyncio.Queue() if stream else None, guide)
        self._inbox.put(row)
        return row

    def invalidate_kv(self) -> None:
        """Forget every cached prefix (the weights changed). Call while holding `weights_lock`."""
        if self.kv is not None:
            self.kv.invalidate()
            self._weights_mark = self._weights_version_sum()

    def _weights_version_sum(self) -> int:
        # torch bumps a tensor's version on every in-place change (optimizer steps, copy_): a guard
        # for a trainer that changes shared weights without `updating_weights`
        return sum(p._version for p in self._params)

    def _check_weights(self) -> None:
        mark = self._weights_version_sum()
        if mark != self._weights_mark:
            self._weights_mark = mark
            self.invalidate_kv()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            # One step (a prefill of a full batch on a loaded CPU) can outlast that. The thread runs
            # torch without the GIL: left running into interpreter exit, libtorch is torn down under
            # it and the process aborts ("terminate called without an active exception").
            log.warning("model engine: waiting for its current step to end before closing")
            self._thread.join(timeout=CLOSE_WAIT_S)

    # ---- the engine thread ----------------------------------------------------------------------
    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stop.is_set():
            new = self._admit()
            if not new and not self._rows:
                continue
            while self.update_waiting.is_set() and not self._stop.is_set():
                self._stop.wait(0.0005)
            try:
                with self.weights_lock, torch.inference_mode():
                    if new:
                        self._prefill(new)
                    if self._rows:
                        self._decode_step()
            except Exception as exc:  # fail the affected requests, keep serving
                log.exception("engine step failed")
                for row in new + self._rows:
                    self._resolve(row, exc)
                self._rows, self._batch = [], None

    def _admit(self) -> list[_Row]:
        room = self.max_batch_size - len(self._rows)
        new: list[_Row] = []
        if room <= 0:
            return new
        if not self._rows:
            try:  # idle: wait for work, then a short window so concurrent arrivals batch together
                new.append(self._inbox.get(timeout=0.1))
            except queue.Empty:
                return new
            if self.batch_window_s > 0:
                self._stop.wait(self.batch_window_s)
        while len(new) < room:
            try:
                new.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        live = [r for r in new if not r.future.cancelled()]
        self.stats["cancelled"] += len(new) - len(live)
        return live

    def _prefill(self, new: list[_Row]) -> None:
        started = time.perf_counter()
        if self.kv is None:
            cache, mask, logits = self._forward([r.prompt for r in new], [None] * len(new))
        else:
            cache, mask, logits = self._prefill_reusing(new)
        self.stats["prefills"] += 1
        if self._rows:
            self.stats["joined_running"] += len(new)
        self._merge(new, cache, mask)
        self.stats["prefill_s"] += time.perf_counter() - started
        self._sample(logits, start=len(self._rows) - len(new))

    def _prefill_reusing(self, new: list[_Row]):
        assert self.kv is not None
        self._check_weights()
        firsts: dict[tuple[int, ...], int] = {}  # identical prompts are prefilled once
        slot = [firsts.setdefault(tuple(r.prompt), len(firsts)) for r in new]
        uniq = [new[slot.index(u)] for u in range(len(firsts))]
        self.stats["shared_rows"] += len(new) - len(uniq)
        self.kv.prefill_shared([r.prompt for r in uniq], self._prefix_kv)
        hits = [self.kv.lookup(r.prompt) for r in uniq]
        need = [len(r.prompt) - (h.length if h is not None else 0) for r, h in zip(uniq, hits, strict=True)]
        # one forward per bucket of similar new-token counts, so short tails are not padded to long ones
        todo = sorted(range(len(uniq)), key=need.__getitem__)
        order: list[int] = []
        cache = mask = logits = None
        while todo:
            take = [u for u in todo if need[u] <= 2 * need[todo[0]] + 32]
            todo = todo[len(take) :]
            c, m, lg = self._forward([uniq[u].prompt for u in take], [hits[u] for u in take])
            if cache is None or mask is None or logits is None:
                cache, mask, logits = c, m, lg
            else:
                cache, mask = cat_left_padded(cache, mask, c, m)
                logits = torch.cat([logits, lg])
            order += take
        assert cache is not None and mask is not None and logits is not None
        where = {u: i for i, u in enumerate(order)}
        keys = []
        for u, r in enumerate(uniq):  # keep each prompt's KV: later samples of its group start from it
            hit = hits[u]
            kv = row_kv(cache, mask[where[u]], where[u])
            replaces = hit.entry if hit is not None and hit.whole else None
            keys.append(self.kv.put(r.prompt, kv, epoch=self.kv.epoch, replaces=replaces))
        for r, u in zip(new, slot, strict=True):
            r.kv_epoch, r.kv_entry = self.kv.epoch, keys[u]
        pick = [where[u] for u in slot]
        if pick != list(range(len(pick))):  # back to submission order, shared prompts expanded
            idx = torch.tensor(pick, device=self.device)
            cache = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in cache]
            mask, logits = mask.index_select(0, idx), logits.index_select(0, idx)
        return cache, mask, logits

    def _prefix_kv(self, prefix: list[int], hit: Hit | None):
        cache, mask, _ = self._forward([prefix], [hit])
        return row_kv(cache, mask[0], 0)

    def _forward(self, prompts: list[list[int]], hits: list[Hit | None]):
        """Prefill `prompts` (each on top of its cached prefix, if any): their batch cache, attention
        mask (cached columns, then new ones) and the logits of each prompt's last token."""
        pre = [h.length if h is not None else 0 for h in hits]
        past_w = max(pre)
        new_w = max(len(r) - p for r, p in zip(prompts, pre, strict=True))
        ids = torch.full((len(prompts), new_w), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), past_w + new_w), dtype=torch.long)
        for i, (r, p) in enumerate(zip(prompts, pre, strict=True)):
            tail = r[p:]
            ids[i, new_w - len(tail) :] = torch.tensor(tail, dtype=torch.long)
            mask[i, past_w - p : past_w] = 1
            mask[i, past_w + new_w - len(tail) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, past_w:]
        from transformers import DynamicCache

        kv = stack_prefixes([h.kv if h else None for h in hits], past_w) if past_w else None
        kw = {cache_kwarg(self.model): DynamicCache(ddp_cache_data=kv) if kv else None}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1, **kw)
        self.stats["prefill_tokens"] += sum(len(r) - p for r, p in zip(prompts, pre, strict=True))
        self.stats["reused_tokens"] += sum(pre)
        cache = [(layer.keys, layer.values) for layer in output_cache(out).layers]
        return cache, mask, out.logits[:, -1, :]

    def _merge(self, new: list[_Row], cache, mask: torch.Tensor) -> None:
        if self._batch is None:
            self._rows, self._batch = list(new), BatchKV(cache, mask, max_rows=self.max_batch_size)
            return
        self._batch.append(cache, mask)
        self._rows = self._rows + list(new)

    def _decode_step(self) -> None:
        batch = self._batch
        assert batch is not None
        started = time.perf_counter()
        n = len(self._rows)
        self.stats["steps"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], n)
        if self.observe_batch is not None:
            self.observe_batch(n)
        last = torch.tensor([[r.out[-1]] for r in self._rows], dtype=torch.long, device=self.device)
        mask = torch.cat([batch.mask, torch.ones((n, 1), dtype=torch.long, device=self.device)], dim=1)
        pos = mask.sum(-1, keepdim=True) - 1
        kw = {cache_kwarg(self.model): batch.step_cache()}  # appends the step's column in place
        out = self.model(input_ids=last, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        batch.stepped(mask)
        self.stats["decode_s"] += time.perf_counter() - started
        self._sample(out.logits[:, -1, :], start=0)

    def _sample(self, logits: torch.Tensor, start: int) -> None:
        logits = logits.float()
        rows = self._rows[start:]
        for i, row in enumerate(rows):
            if row.guide is not None:
                logits[i] = row.guide.constrain(logits[i])
        toks, lps = sample_rows(logits, [r.params for r in rows], [r.generator for r in rows])
        for row, tok, lp in zip(rows, toks, lps, strict=True):
            if row.guide is not None:
                row.guide.advance(tok)
            row.out.append(tok)
            row.log_probs.append(lp)
            if row.tokens is not None:
                self._push(row, tok)
            if tok in self.eos_ids and not row.params.ignore_eos:
                row.finish = "stop"
            elif len(row.out) >= row.params.max_tokens:
                row.finish = "length"
        self._retire()

    def _retire(self) -> None:
        keep = [i for i, r in enumerate(self._rows) if r.finish is None and not r.future.cancelled()]
        if len(keep) == len(self._rows):
            return
        self.stats["cancelled"] += sum(r.finish is None for r in self._rows) - len(keep)
        batch = self._batch
        views = batch.views() if batch is not None and self.kv is not None else None
        for i, r in enumerate(self._rows):
            if r.finish is not None:
                self._resolve(r, EngineResult(r.out, r.log_probs, r.finish, self.weight_version))
                if views is not None:  # the prefix cache is on and the batch holds this row's KV
                    self._check_weights()
                    # its KV covers the prompt and every sampled token but the last (never fed back)
                    seq = r.prompt + r.out[:-1]
                    kv = row_kv(views, batch.mask[i], i)
                    self.kv.put(seq, kv, epoch=r.kv_epoch, replaces=r.kv_entry)
        if not keep or batch is None:
            self._rows, self._batch = [], None
            return
        self._rows = [self._rows[i] for i in batch.keep(keep)]

    @staticmethod
    def _push(row: _Row, value: Any) -> None:
        assert row.tokens is not None
        # Callbacks run in submission order, so the caller sees tokens before the result;
        # a RuntimeError means the caller's loop is closed.
        with contextlib.suppress(RuntimeError):
            row.loop.call_soon_threadsafe(row.tokens.put_nowait, value)

    @classmethod
    def _resolve(cls, row: _Row, value: Any) -> None:
        if row.tokens is not None:
            cls._push(row, value)

        def deliver() -> None:
            if row.future.done():
                return
            if row.tokens is not None:  # the queue carried the outcome; the future only marks the end
                row.future.set_result(None)
            elif isinstance(value, BaseException):
                row.future.set_exception(value)
            else:
                row.future.set_result(value)

        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            row.loop.call_soon_threadsafe(deliver)
