"""The local backend: a transformers model in this process (CPU, or CUDA when present), decoded by
the continuous-batching engine on its own thread so the event loop stays responsive.

A trainer serves its current policy in process with `LocalBackend.from_model(model, tokenizer,
weight_version=...)`: the weights are shared, not copied. To change them while serving, hold
`backend.updating_weights(new_version)`: it waits for the current decode step, blocks the next
one until the update is done, and stamps later outputs with the new version.

Structured output (`text.format` json_schema / json_object) and a forced `tool_choice` (required,
or a named function) are enforced by constrained decoding: each such generation gets a guide
(structured_tokens) that masks the logits of every step. `guide_backend` picks the compiler and
mask engine: "native" (structured.py, the default) or "llguidance" (structured_llg: vLLM's
guidance backend, more of JSON Schema; the `guides` extra).

Prefix KV reuse (`kv_reuse`, on by default): the engine keeps the KV of prompts and finished
sequences, up to `kv_cache_mb`, so an episode's next call and the other samples of a group prefill
only their new tokens (kv_cache.py). A weight update drops it all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from rollgate.core.errors import CapacityError
from rollgate.core.metrics import Metrics
from rollgate.model_server.backend import CallContext, SamplingParams
from rollgate.model_server.engine import Engine, EngineResult
from rollgate.model_server.output import Generation
from rollgate.model_server.structured import JsonFormat
from rollgate.model_server.structured_tokens import TokenIndex, ToolCallGuide
from rollgate.model_server.textstream import IncrementalDetokenizer

log = logging.getLogger("rollgate.model_server.local")
GUIDE_BACKENDS = ("native", "llguidance")


def guide_index(guide_backend: str, tokenizer: Any, eos_ids: set[int]) -> Any:
    """The structured-output index of one tokenizer: `.constraint(fmt)` compiles a format (a 400 for
    what it cannot enforce), `.guide(fmt)` starts one generation's guide."""
    if guide_backend == "native":
        return TokenIndex(tokenizer, eos_ids)
    if guide_backend == "llguidance":
        try:
            from rollgate.model_server.structured_llg import LlgIndex

            return LlgIndex(tokenizer, eos_ids)
        except ImportError as exc:
            raise RuntimeError(
                "settings.model.guide_backend 'llguidance' needs the llguidance package: pip install 'rollgate[guides]'"
            ) from exc
    raise ValueError(f"settings.model.guide_backend: unknown {guide_backend!r}; known: {list(GUIDE_BACKENDS)}")


def pick_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class LocalBackend:
    name = "local"

    def __init__(
        self,
        model,
        tokenizer,
        *,
        weight_version: str | None = None,
        max_batch_size: int = 64,
        batch_window_ms: float = 5.0,
        max_queue: int = 4096,
        metrics: Metrics | None = None,
        kv_reuse: bool = True,
        kv_cache_mb: float = 1024.0,
        guide_backend: str = "native",
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_context: int | None = getattr(model.config, "max_position_embeddings", None)
        self.max_queue = max_queue
        eos = {tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        observe = metrics.model_batch_size.observe if metrics is not None else None
        self.engine = Engine(
            self.model,
            eos_ids=eos,
            pad_id=pad,
            max_batch_size=max_batch_size,
            batch_window_ms=batch_window_ms,
            observe_batch=observe,
            kv_cache_bytes=int(kv_cache_mb * 2**20) if kv_reuse else None,
        )
        self.engine.weight_version = weight_version
        if guide_backend not in GUIDE_BACKENDS:
            raise ValueError(f"settings.model.guide_backend: unknown {guide_backend!r}; known: {list(GUIDE_BACKENDS)}")
        self.guide_backend = guide_backend
        self._token_index: Any = None  # built on the first structured request

    @classmethod
    def from_model(cls, model, tokenizer, *, weight_version: str | None = None, **kwargs: Any) -> LocalBackend:
        """Serve an in-memory model (shared weights, e.g. a trainer's current policy)."""
        return cls(model, tokenizer, weight_version=weight_version, **kwargs)

    @classmethod
    def from_pretrained(
        cls, path: str, *, device: str = "auto", weight_version: str | None = None, **kwargs: Any
    ) -> LocalBackend:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path).to(pick_device(device))
        return cls(model, tokenizer, weight_version=weight_version, **kwargs)

    @property
    def weight_version(self) -> str | None:
        return self.engine.weight_version

    @contextlib.contextmanager
    def updating_weights(self, version: str | None) -> Iterator[Any]:
        """Hold while changing the model's weights in place; yields the model."""
        self.engine.update_waiting.set()
        try:
            self.engine.weights_lock.acquire()
        finally:
            self.engine.update_waiting.clear()
        try:
            yield self.model
            self.engine.weight_version = version
        finally:
            self.engine.invalidate_kv()  # cached KV came from the old weights (even if the update failed midway)
            self.engine.weights_lock.release()

    def load_weights(self, tensors: Mapping[str, Any], version: str) -> None:
        """Copy `tensors` (checked and staged on the model's device by model_server.weights) into
        the served model between two decode steps; later generations carry `version`."""
        import torch

        with self.updating_weights(version) as model, torch.no_grad():
            served = model.state_dict()
            for name, tensor in tensors.items():
                served[name].copy_(tensor)

    def ready(self) -> bool:
        return True

    def check_format(self, fmt: JsonFormat) -> None:
        """Compile the format for this tokenizer now: a 400 before any generation starts."""
        self._index().constraint(fmt)

    def _index(self) -> Any:
        if self._token_index is None:
            self._token_index = guide_index(self.guide_backend, self.tokenizer, self.engine.eos_ids)
        return self._token_index

    def _guide(self, params: SamplingParams) -> Any:
        if params.tool_call is not None:
            tc = params.tool_call
            return ToolCallGuide(self._index().guide(tc.body), tc.prefix_ids, tc.suffix_ids)
        if params.json_format is not None:
            return self._index().guide(params.json_format)
        return None

    def check_capacity(self) -> None:
        if self.engine.pending() >= self.max_queue:
            raise CapacityError(
                f"the local model has {self.max_queue} requests waiting; retry later",
                component="model",
                retry_after_s=1.0,
            )

    async def generate(self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext) -> Generation:
        assert prompt_ids is not None, "the local backend needs prompt token ids"
        self.check_capacity()
        version = self.weight_version  # at submission: the oldest weights this turn can come from
        fut = self.engine.submit(prompt_ids, params, self._guide(params))
        try:
            res = await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.cancel()  # the engine drops the row at its next step
            raise
        return self._generation(prompt_ids, res, version)

    async def generate_stream(
        self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext
    ) -> AsyncIterator[str | Generation]:
        """Text deltas as the tokens are decoded, then the Generation. Closing the iterator early
        (the client went away) drops the request from the batch."""
        assert prompt_ids is not None, "the local backend needs prompt token ids"
        self.check_capacity()
        version = self.weight_version
        fut, tokens = self.engine.submit_streaming(prompt_ids, params, self._guide(params))
        detok = IncrementalDetokenizer(self.tokenizer)
        try:
            while True:
                item = await tokens.get()
                if isinstance(item, EngineResult):
                    yield self._generation(prompt_ids, item, version)
                    return
                if isinstance(item, BaseException):
                    raise item
                if item in self.engine.eos_ids and not params.ignore_eos:
                    continue  # the end-of-turn token ends the text; it is not part of it
                delta = detok.push(item)
                if delta:
                    yield delta
        finally:
            fut.cancel()  # a no-op once finished

    def _generation(self, prompt_ids: list[int], res: EngineResult, version: str | None) -> Generation:
        # Stamped with the version at submission: a turn that straddles a weight update counts as
        # the older policy (staleness is then overestimated, never underestimated).
        text_ids = res.token_ids[:-1] if res.finish_reason == "stop" else res.token_ids
        text = self.tokenizer.decode(text_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return Generation(
            text=text,
            finish_reason=res.finish_reason,
            prompt_ids=list(prompt_ids),
            token_ids=res.token_ids,
            log_probs=res.log_probs,
            weight_version=version,
        )

    async def aclose(self) -> None:
        await asyncio.to_thread(self.engine.close)
