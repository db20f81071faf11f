"""What the service asks of a backend, as runtime-checkable Protocols: the service tests
`isinstance(backend, Capability)` instead of probing attributes. Token backends (local, vllm,
scripted with a tokenizer) receive prompt token ids built by the service and return generated ids
and log-probs; streaming ones also yield text as it is generated; constrained ones enforce JSON
formats and forced tool calls; a passthrough backend (openai) forwards the whole request."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rollgate.model_server.output import Generation
from rollgate.model_server.structured import JsonFormat
from rollgate.model_server.toolcalls import ToolCallConstraint
from rollgate.model_server.wire import InputItem, ResponsesRequest


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False  # benchmarking: always generate max_tokens (like vLLM's ignore_eos)
    json_format: JsonFormat | None = None  # structured output, for a ConstrainedBackend
    tool_call: ToolCallConstraint | None = None  # a forced tool_choice, for a ConstrainedBackend


@dataclass
class CallContext:
    """The validated request, for backends that decide from it (scripted) rather than from tokens."""

    request: ResponsesRequest
    items: list[InputItem]
    session_key: str | None = None


@runtime_checkable
class Backend(Protocol):
    """A token backend (or a text-only one, with `tokenizer` None)."""

    name: str
    tokenizer: Any | None  # a Hugging Face tokenizer, or None for a text-only backend
    max_context: int | None

    async def generate(self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext) -> Generation: ...

    def ready(self) -> bool: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    """A token backend that also streams (local, scripted); the others are streamed whole."""

    def generate_stream(
        self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext
    ) -> AsyncIterator[str | Generation]:
        """Text deltas as they are generated, then the Generation, last. Closing the iterator
        early cancels the generation."""
        ...


@runtime_checkable
class ConstrainedBackend(Protocol):
    """Enforces `SamplingParams.json_format` and `.tool_call` by constrained decoding."""

    def check_format(self, fmt: JsonFormat) -> None:
        """A 400 naming the schema keyword it cannot enforce, before any generation starts."""
        ...


@runtime_checkable
class AdmissionControl(Protocol):
    """A backend with a bounded queue: refuses a request it has no room for (a 503)."""

    def check_capacity(self) -> None: ...


@runtime_checkable
class PassthroughBackend(Protocol):
    name: str

    async def forward(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def ready(self) -> bool: ...

    async def aclose(self) -> None: ...


# --- weight updates (weights.py): each backend holds its weights one of three ways -----------


@runtime_checkable
class InProcessWeights(Protocol):
    """Holds its weights in this process (local): an update is staged against `model`'s tensors,
    then swapped in between steps."""

    model: Any  # the torch module whose tensors an update replaces

    def load_weights(self, tensors: Mapping[str, Any], version: str) -> None: ...


@runtime_checkable
class ReloadableWeights(Protocol):
    """Serves weights that other processes load (vllm): an update is a checkpoint path they read."""

    async def reload_weights(self, path: str, version: str) -> None: ...


@runtime_checkable
class VersionOnlyWeights(Protocol):
    """Holds no weights (scripted): an update only sets the version its turns are stamped with."""

    def set_weight_version(self, version: str) -> None: ...


@runtime_checkable
class Versioned(Protocol):
    """Stamps its turns with the version of the weights that produced them."""

    weight_version: str | None
