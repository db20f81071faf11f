"""What the service asks of a backend. Token backends (local, vllm, scripted with a tokenizer)
receive prompt token ids built by the service and return generated ids and log-probs (streaming
ones also yield text as it is generated); a passthrough backend (openai) forwards the whole
request instead."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from rollgate.model_server.output import Generation
from rollgate.model_server.structured import JsonFormat
from rollgate.model_server.wire import InputItem, ResponsesRequest


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False  # benchmarking: always generate max_tokens (like vLLM's ignore_eos)
    json_format: JsonFormat | None = None  # structured output, for backends with `structured_output = True`


@dataclass
class CallContext:
    """The validated request, for backends that decide from it (scripted) rather than from tokens."""

    request: ResponsesRequest
    items: list[InputItem]
    session_key: str | None = None


class Backend(Protocol):
    name: str
    tokenizer: Any | None  # a Hugging Face tokenizer, or None for a text-only backend
    max_context: int | None

    async def generate(self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext) -> Generation: ...

    def ready(self) -> bool: ...

    async def aclose(self) -> None: ...


class StreamingBackend(Backend, Protocol):
    """A token backend that also streams (local, scripted); the others are streamed whole."""

    def generate_stream(
        self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext
    ) -> AsyncIterator[str | Generation]:
        """Text deltas as they are generated, then the Generation, last. Closing the iterator
        early cancels the generation."""
        ...


class PassthroughBackend(Protocol):
    name: str

    async def forward(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def ready(self) -> bool: ...

    async def aclose(self) -> None: ...
