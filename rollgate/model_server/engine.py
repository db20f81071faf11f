"""A continuous-batching decode engine for a transformers causal LM, on one dedicated thread.

Iteration-level batching: requests that arrive while a batch is decoding are prefilled and join
the running batch at the next decode step; finished sequences leave at once. Sequences are left
padded; attention masks and per-row position ids keep padding invisible; one shared KV cache
holds every running row (rows joining are padded on the left to the batch's length; columns no
row needs any more are trimmed). Each row samples with its own temperature / top_p / seed.
A streaming row also hands each sampled token to its caller's event loop as it is decoded; a
row whose future is cancelled (the caller went away) leaves the batch at the next step.

Log-probs are those of each sampled token under the temperature-scaled distribution
(log_softmax(logits / T)), before top-p truncation: what TRL recomputes. At temperature 0
(greedy) they are under the unscaled distribution."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rollgate.model_server.backend import SamplingParams

log = logging.getLogger("rollgate.model_server.engine")


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
    out: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    finish: str | None = None


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
    ):
        self.model = model
        self.device = next(model.parameters()).device
        self.eos_ids = eos_ids
        self.pad_id = pad_id
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_ms / 1000.0
        self.observe_batch = observe_batch
        self.weights_lock = threading.Lock()  # held for each step; a trainer holds it to swap weights
        self.weight_version: str | None = None
        self.stats = {"steps": 0, "prefills": 0, "max_batch": 0, "joined_running": 0, "cancelled": 0}
        self._inbox: queue.Queue[_Row] = queue.Queue()
        self._rows: list[_Row] = []
        self._cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._mask: torch.Tensor | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollgate-engine", daemon=True)
        self._thread.start()

    # ---- called from the event loop -------------------------------------------------------------
    def pending(self) -> int:
        return self._inbox.qsize() + len(self._rows)

    def submit(self, prompt: list[int], params: SamplingParams) -> asyncio.Future:
        """The future resolves to an EngineResult; cancelling it drops the row."""
        return self._submit(prompt, params, stream=False).future

    def submit_streaming(self, prompt: list[int], params: SamplingParams) -> tuple[asyncio.Future, asyncio.Queue]:
        """The queue receives each sampled token id as it is decoded, then the EngineResult (or the
        exception); cancelling the future drops the row."""
        row = self._submit(prompt, params, stream=True)
        assert row.tokens is not None
        return row.future, row.tokens

    def _submit(self, prompt: list[int], params: SamplingParams, *, stream: bool) -> _Row:
        loop = asyncio.get_running_loop()
        gen = None
        if params.seed is not None:
            gen = torch.Generator(device="cpu").manual_seed(params.seed)
        row = _Row(list(prompt), params, loop.create_future(), loop, gen, asyncio.Queue() if stream else None)
        self._inbox.put(row)
        return row

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # ---- the engine thread ----------------------------------------------------------------------
    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stop.is_set():
            new = self._admit()
            if not new and not self._rows:
                continue
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
                self._rows, self._cache, self._mask = [], None, None

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
        width = max(len(r.prompt) for r in new)
        ids = torch.full((len(new), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(new), width), dtype=torch.long)
        for i, r in enumerate(new):
            ids[i, width - len(r.prompt) :] = torch.tensor(r.prompt, dtype=torch.long)
            mask[i, width - len(r.prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        cache = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        self.stats["prefills"] += 1
        if self._rows:
            self.stats["joined_running"] += len(new)
        self._merge(new, cache, mask)
        self._sample(out.logits[:, -1, :], start=len(self._rows) - len(new))

    def _merge(self, new: list[_Row], cache, mask: torch.Tensor) -> None:
        if self._cache is None or self._mask is None:
            self._rows, self._cache, self._mask = list(new), cache, mask
            return
        a, b = self._mask.shape[1], mask.shape[1]
        width = max(a, b)

        def pad(t: torch.Tensor, n: int) -> torch.Tensor:  # left-pad the sequence dim (-2 for kv, -1 mask)
            if n == 0:
                return t
            if t.dim() == 2:
                return torch.nn.functional.pad(t, (n, 0), value=0)
            return torch.nn.functional.pad(t, (0, 0, n, 0), value=0.0)

        self._cache = [
            (torch.cat([pad(k0, width - a), pad(k1, width - b)]), torch.cat([pad(v0, width - a), pad(v1, width - b)]))
            for (k0, v0), (k1, v1) in zip(self._cache, cache, strict=True)
        ]
        self._mask = torch.cat([pad(self._mask, width - a), pad(mask, width - b)])
        self._rows = self._rows + list(new)

    def _decode_step(self) -> None:
        from transformers import DynamicCache

        assert self._cache is not None and self._mask is not None
        n = len(self._rows)
        self.stats["steps"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], n)
        if self.observe_batch is not None:
            self.observe_batch(n)
        last = torch.tensor([[r.out[-1]] for r in self._rows], dtype=torch.long, device=self.device)
        mask = torch.cat([self._mask, torch.ones((n, 1), dtype=torch.long, device=self.device)], dim=1)
        pos = mask.sum(-1, keepdim=True) - 1
        cache = DynamicCache(ddp_cache_data=self._cache)
        out = self.model(input_ids=last, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
        self._cache = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        self._mask = mask
        self._sample(out.logits[:, -1, :], start=0)

    def _sample(self, logits: torch.Tensor, start: int) -> None:
        logits = logits.float()
        for i in range(start, len(self._rows)):
            row = self._rows[i]
            tok, lp = _sample_one(logits[i - start], row.params, row.generator)
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
        for r in self._rows:
            if r.finish is not None:
                self._resolve(r, EngineResult(r.out, r.log_probs, r.finish, self.weight_version))
        if not keep:
            self._rows, self._cache, self._mask = [], None, None
            return
        assert self._cache is not None and self._mask is not None
        idx = torch.tensor(keep, device=self.device)
        mask = self._mask.index_select(0, idx)
        first = int(mask.any(0).nonzero()[0])  # columns before this are padding for every row left
        self._mask = mask[:, first:]
        self._cache = [
            (k.index_select(0, idx)[:, :, first:], v.index_select(0, idx)[:, :, first:]) for k, v in self._cache
        ]
        self._rows = [self._rows[i] for i in keep]

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


def _sample_one(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator | None) -> tuple[int, float]:
    if params.temperature <= 0.0:
        tok = int(torch.argmax(logits))
        return tok, float(torch.log_softmax(logits, -1)[tok])
    logp = torch.log_softmax(logits / params.temperature, -1)
    probs = logp.exp()
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        cut = (sorted_p.cumsum(-1) - sorted_p) >= params.top_p  # keep the smallest set reaching top_p
        sorted_p[cut] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
    tok = int(torch.multinomial(probs.cpu(), 1, generator=gen))
    return tok, float(logp[tok])
