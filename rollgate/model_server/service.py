"""The Responses service: validate the request, build the prompt (token-in/token-out when the
history carries token ids), call the backend, and answer a Responses object, whole (`create`) or
as stream events while it is generated (`stream`). HTTP-free, so the embedded shape calls it in
process and the app only adds routes."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from rollgate.core.errors import BadRequest, NotFound, RollgateError
from rollgate.core.metrics import Metrics
from rollgate.model_server import sse
from rollgate.model_server.backend import Backend, CallContext, PassthroughBackend, SamplingParams
from rollgate.model_server.chat import PromptBuilder, build_chat
from rollgate.model_server.output import Generation, attach_tokens, build_response, new_id, parse_text
from rollgate.model_server.wire import COMPONENT, ResponsesRequest, parse_items, parse_request

log = logging.getLogger("rollgate.model_server.service")

TRAINING_KEY = "rollgate_training"
SESSION_KEY = "rollgate_session"
IGNORE_EOS_KEY = "rollgate_ignore_eos"  # benchmarking: generate exactly max_output_tokens
TRUE = {"1", "true", "yes", "on"}
FALSE = {"", "0", "false", "no", "off"}


class ModelService:
    """A ResponsesService over one backend."""

    def __init__(
        self,
        backend: Backend | PassthroughBackend,
        *,
        served_name: str = "rollgate-tiny",
        default_max_output_tokens: int = 256,
        training_mode: bool = False,
        max_context_tokens: int | None = None,
        metrics: Metrics | None = None,
        aliases: tuple[str, ...] = (),
    ):
        self.backend = backend
        self.served_name = served_name
        self.model_names = {served_name, *aliases}
        self.default_max_output_tokens = default_max_output_tokens
        self.training_mode = training_mode
        self.metrics = metrics
        tokenizer = getattr(backend, "tokenizer", None)
        self.prompts = PromptBuilder(tokenizer) if tokenizer is not None else None
        self.max_context = max_context_tokens or getattr(backend, "max_context", None)

    def ready(self) -> bool:
        return self.backend.ready()

    async def aclose(self) -> None:
        await self.backend.aclose()

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "rollgate"}
                for name in sorted(self.model_names)
            ],
        }

    async def create(self, request: dict[str, Any], *, training: bool | None = None) -> dict[str, Any]:
        try:
            out = await self._create(request, training)
        except RollgateError as exc:
            self._count("bad_request" if exc.status < 500 else "error")
            raise
        except Exception:
            self._count("error")
            raise
        self._count("ok")
        return out

    async def stream(self, request: dict[str, Any], *, training: bool | None = None) -> AsyncIterator[dict[str, Any]]:
        """The Responses stream events of a request. The request is validated (and admitted) here,
        so its errors raise before the first event and keep their HTTP status; later failures
        become an `error` event. Closing the iterator early cancels the generation."""
        try:
            req = self._validate(request)
            if hasattr(self.backend, "forward") or not hasattr(self.backend, "generate_stream"):
                # no token stream here: generate first, then stream the complete response's events
                return _iterate(sse.events(await self._create(request, training)))
            call = self._prepare(req, training)
            check = getattr(self.backend, "check_capacity", None)
            if check is not None:
                check()
        except RollgateError as exc:
            self._count("bad_request" if exc.status < 500 else "error")
            raise
        return self._stream(call)

    def _count(self, status: str) -> None:
        if self.metrics is not None:
            self.metrics.model_requests.labels(self.backend.name, status).inc()

    def _validate(self, body: dict[str, Any]) -> ResponsesRequest:
        req = parse_request(body)
        if req.model not in self.model_names:
            raise NotFound(
                f"model {req.model!r} is not served here; served: {sorted(self.model_names)}",
                component=COMPONENT,
                field="model",
            )
        return req

    async def _create(self, body: dict[str, Any], training: bool | None) -> dict[str, Any]:
        req = self._validate(body)
        if hasattr(self.backend, "forward"):
            return await self.backend.forward(body)  # type: ignore[union-attr]
        call = self._prepare(req, training)
        gen = await self.backend.generate(call.prompt_ids, call.params, call.ctx)  # type: ignore[union-attr]
        return self._respond(call, gen)

    def _prepare(self, req: ResponsesRequest, training: bool | None) -> _Call:
        items = parse_items(req.input)
        raw_items = req.input if isinstance(req.input, list) else None
        meta = req.metadata or {}
        training = bool(training or self.training_mode or _flag(meta, TRAINING_KEY))
        seed = req.seed
        if seed is None and "rollgate_seed" in meta:
            try:
                seed = int(meta["rollgate_seed"])
            except ValueError:
                raise BadRequest(
                    "metadata.rollgate_seed: must be an integer", component=COMPONENT, field="metadata.rollgate_seed"
                ) from None
        max_tokens = req.max_output_tokens or self.default_max_output_tokens
        prompt_ids: list[int] | None = None
        if self.prompts is not None:
            chat = build_chat(req, items, raw_items)
            prompt_ids, _ = self.prompts.prompt_ids(chat)
            if self.max_context is not None:
                room = self.max_context - len(prompt_ids)
                if room <= 0:
                    raise BadRequest(
                        f"the prompt has {len(prompt_ids)} tokens; the model's context is {self.max_context}",
                        component=COMPONENT,
                        field="input",
                    )
                max_tokens = min(max_tokens, room)
        temperature = 1.0 if req.temperature is None else req.temperature
        top_p = 1.0 if req.top_p is None else req.top_p
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            ignore_eos=_flag(meta, IGNORE_EOS_KEY, strict=True),
        )
        ctx = CallContext(req, items, meta.get(SESSION_KEY) or _session_key(raw_items, req.input))
        return _Call(req, prompt_ids, params, ctx, training)

    def _respond(
        self, call: _Call, gen: Generation, *, response_id: str | None = None, created_at: int | None = None
    ) -> dict[str, Any]:
        output = parse_text(gen.text)
        if call.training:
            attach_tokens(output, gen)
        n_in = len(gen.prompt_ids or call.prompt_ids or [])
        n_out = len(gen.token_ids or [])
        if self.metrics is not None:
            self.metrics.model_tokens.labels("in").inc(n_in)
            self.metrics.model_tokens.labels("out").inc(n_out)
        return build_response(
            call.req,
            call.req.model,
            output,
            input_tokens=n_in,
            output_tokens=n_out,
            finish_reason=gen.finish_reason,
            temperature=call.params.temperature,
            top_p=call.params.top_p,
            max_output_tokens=call.req.max_output_tokens,
            response_id=response_id,
            created_at=created_at,
        )

    async def _stream(self, call: _Call) -> AsyncIterator[dict[str, Any]]:
        writer = sse.StreamWriter()
        response_id, created_at = new_id("resp"), int(time.time())
        start = build_response(
            call.req,
            call.req.model,
            [],
            input_tokens=0,
            output_tokens=0,
            finish_reason="stop",
            temperature=call.params.temperature,
            top_p=call.params.top_p,
            max_output_tokens=call.req.max_output_tokens,
            response_id=response_id,
            created_at=created_at,
        )
        for event in writer.start(start):
            yield event
        status = "cancelled"  # unless it gets to the end: the client went away
        try:
            gen: Generation | None = None
            pieces = self.backend.generate_stream(call.prompt_ids, call.params, call.ctx)  # type: ignore[union-attr]
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    if isinstance(piece, str):
                        for event in writer.text(piece):
                            yield event
                    else:
                        gen = piece
            if gen is None:
                raise RuntimeError(f"backend {self.backend.name!r} ended its stream without a generation")
            response = self._respond(call, gen, response_id=response_id, created_at=created_at)
            status = "ok"
        except RollgateError as exc:
            status = "bad_request" if exc.status < 500 else "error"
            log.warning("stream %s failed: %s", response_id, exc)
            yield writer.error(exc)
            return
        except Exception as exc:
            status = "error"
            log.exception("stream %s failed", response_id)
            yield writer.error(exc)
            return
        finally:
            self._count(status)
        for event in writer.finish(response):
            yield event


@dataclass
class _Call:
    """A validated request, ready for the backend."""

    req: ResponsesRequest
    prompt_ids: list[int] | None
    params: SamplingParams
    ctx: CallContext
    training: bool


def _flag(meta: dict[str, str], key: str, *, strict: bool = False) -> bool:
    value = meta.get(key, "").lower()
    if strict and value not in TRUE | FALSE:
        raise BadRequest(
            f'metadata.{key}: must be "true" or "false", got {meta[key]!r}',
            component=COMPONENT,
            field=f"metadata.{key}",
        )
    return value in TRUE


async def _iterate(events: Iterable[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for event in events:
        yield event


def _session_key(raw_items: list[dict[str, Any]] | None, raw: Any) -> str:
    """Requests of one episode share their first item: hashing it keeps an episode on one replica."""
    first = raw_items[0] if raw_items else raw
    return hashlib.sha1(repr(first).encode()).hexdigest()
