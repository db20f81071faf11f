"""Where a model request's preparation (validation, chat template, tokenizing) runs.

A small request is prepared inline: a thread hop would cost more than the work. A large one
(over `inline_chars` of text) runs on a bounded pool (rollgate.core.offload): tokenizing a
7 MB prompt takes seconds of CPU, during which the event loop must keep serving. A prompt that
cannot fit the model's context whatever its tokens is refused before it is tokenized at all."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from rollgate.core.errors import ContextExhausted
from rollgate.core.offload import CpuPool, text_size

T = TypeVar("T")
COMPONENT = "model"
INLINE_CHARS = 64 * 1024


class Admission:
    def __init__(
        self, tokenizer: Any, max_context: int | None, *, pool: CpuPool | None = None, inline_chars: int = INLINE_CHARS
    ):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.pool = pool if pool is not None else CpuPool("prepare", component=COMPONENT)
        self.inline_chars = inline_chars
        self._max_piece: int | None = None

    async def run(self, body: Any, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)`, the preparation of `body`: inline, or on the pool when large."""
        if self.tokenizer is None:  # nothing to template or tokenize here (a scripted or forwarding backend)
            return fn(*args, **kwargs)
        size = text_size(body, stop_at=self.inline_chars)
        if size <= self.inline_chars:
            return fn(*args, **kwargs)
        return await self.pool.run(functools.partial(self._prepare, body, fn, *args, **kwargs))

    def _prepare(self, body: Any, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self._check_fits(body)
        return fn(*args, **kwargs)

    def _check_fits(self, body: Any) -> None:
        # A token covers at most the longest vocabulary entry's characters: past
        # max_context * that, no tokenization can fit the context.
        if self.tokenizer is None or self.max_context is None:
            return
        if self._max_piece is None:
            self._max_piece = max(1, max(map(len, self.tokenizer.get_vocab()), default=1))
        bound = self.max_context * self._max_piece
        if isinstance(body, dict):
            body = {k: v for k, v in body.items() if k != "metadata"}  # not part of the prompt
        size = text_size(body, stop_at=bound)
        if size > bound:
            raise ContextExhausted(
                f"the prompt has over {bound} characters: more than the model's context of {self.max_context} "
                f"tokens can hold (a token covers at most {self._max_piece})",
                component=COMPONENT,
                field="input",
            )
