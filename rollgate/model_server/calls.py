"""The internal form every API dialect converts to and from.

A dialect (Responses, Chat Completions, Anthropic Messages) turns its request into a Responses
request body (items are the richest common form: messages, reasoning, function calls and their
outputs) plus the few options Responses has no field for (`n`, stop sequences); the service
prepares a `Call` from it and answers `Choice`s, each holding Responses output items and the
Generation behind them. The dialect turns those back into its own reply."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from rollgate.model_server.backend import CallContext, SamplingParams
from rollgate.model_server.chat import Chat
from rollgate.model_server.output import TAGS, Generation
from rollgate.model_server.toolcalls import ToolChoice
from rollgate.model_server.wire import ResponsesRequest

MAX_N = 16  # choices per call: each is a full generation in the batch


@dataclass
class Call:
    """A validated request, ready for the backend."""

    req: ResponsesRequest
    body: dict[str, Any]  # the Responses body (a passthrough backend forwards it)
    prompt_ids: list[int] | None
    params: SamplingParams
    ctx: CallContext
    training: bool
    api: str = "responses"
    chat: Chat | None = None
    session: str | None = None  # capture session
    extends: int | None = None  # the captured call this prompt extends
    n: int = 1
    stop: tuple[str, ...] = ()
    tool_choice: ToolChoice = field(default_factory=lambda: ToolChoice("auto"))
    tags: tuple[str, ...] = TAGS  # where the model's structured output starts (a stream holds text back)

    @property
    def previous_response_id(self) -> str | None:
        prev = self.body.get("previous_response_id") if isinstance(self.body, dict) else None
        return prev if isinstance(prev, str) else None

    def params_for(self, index: int) -> SamplingParams:
        """Choice `index` samples with seed + index, so n choices differ but stay reproducible."""
        if index == 0 or self.params.seed is None:
            return self.params
        return dataclasses.replace(self.params, seed=self.params.seed + index)


@dataclass
class Choice:
    items: list[dict[str, Any]]  # Responses output items, without token fields
    finish_reason: str  # "stop" | "length"
    gen: Generation | None = None  # None from a passthrough backend
    stop_sequence: str | None = None  # the stop sequence that ended it
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(
            p.get("text", "") for i in self.items if i.get("type") == "message" for p in i.get("content") or []
        )

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [i for i in self.items if i.get("type") == "function_call"]

    @property
    def reasoning(self) -> str:
        return "".join(
            p.get("text", "") for i in self.items if i.get("type") == "reasoning" for p in i.get("content") or []
        )


@dataclass
class ResponseStarted:
    """A Responses stream's first event: the response being generated (its output still empty)."""

    response: dict[str, Any]


@dataclass
class TextDelta:
    """Message text, as generated: only what the final message text certainly starts with."""

    text: str


@dataclass
class ResponseDone:
    """The complete response, as a non-streaming call returns it."""

    response: dict[str, Any]


@dataclass
class ResponseFailed:
    """Generation failed after the stream started."""

    error: BaseException


ResponseEvent = ResponseStarted | TextDelta | ResponseDone | ResponseFailed


def apply_stop(gen: Generation, stops: tuple[str, ...], tokenizer: Any | None) -> tuple[Generation, str | None]:
    """Cut a generation at its first stop sequence: the text before it, and the ids up to the token
    that completes it (those were sampled; the ids after it were not shown to the client)."""
    hits = [(pos, s) for s in stops if (pos := gen.text.find(s)) >= 0]
    if not hits:
        return gen, None
    pos, stop = min(hits)
    ids = gen.token_ids
    lps = gen.log_probs
    if ids is not None and tokenizer is not None:
        need = pos + len(stop)
        lo, hi = 1, len(ids)
        while lo < hi:  # the fewest tokens whose text holds the stop sequence
            mid = (lo + hi) // 2
            if len(tokenizer.decode(ids[:mid], skip_special_tokens=False)) >= need:
                hi = mid
            else:
                lo = mid + 1
        ids = ids[:lo]
        lps = lps[:lo] if lps is not None else None
    cut = Generation(
        text=gen.text[:pos],
        finish_reason="stop",
        prompt_ids=gen.prompt_ids,
        token_ids=ids,
        log_probs=lps,
        weight_version=gen.weight_version,
        extra=gen.extra,
    )
    return cut, stop


def forwarded(out: dict[str, Any]) -> Choice:
    """A passthrough backend's Responses object as a Choice (no token data)."""
    finish = "length" if out.get("status") == "incomplete" else "stop"
    return Choice(list(out.get("output") or []), finish)


async def merge(streams: list[AsyncIterator[Any]]) -> AsyncIterator[tuple[int, Any]]:
    """(index, piece) from several async iterators as the pieces arrive. Closing the merged
    iterator early cancels every producer (their generations leave the batch)."""
    queue: asyncio.Queue[tuple[int, Any, BaseException | None, bool]] = asyncio.Queue()

    async def pump(i: int, it: AsyncIterator[Any]) -> None:
        try:
            async with contextlib.aclosing(it):  # type: ignore[type-var]
                async for piece in it:
                    await queue.put((i, piece, None, False))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
            await queue.put((i, None, exc, True))
            return
        await queue.put((i, None, None, True))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            i, piece, exc, done = await queue.get()
            if exc is not None and not isinstance(exc, asyncio.CancelledError):
                raise exc
            if done:
                left -= 1
            else:
                yield i, piece
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
