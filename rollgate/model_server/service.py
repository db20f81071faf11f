"""The model service over one backend: validate a request, build the prompt (token-in/token-out
when the history carries token ids, or when a capture session holds the previous call), call the
backend and answer. Every API dialect goes through `prepare` and `complete` / `complete_stream`
(see calls.py for the internal form); the Responses API, the form the others convert to, is
answered here (`create`, `stream`, `retrieve`). HTTP-free, so the embedded shape calls it in
process and the app only adds routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from rollgate.core.errors import BadRequest, NotFound, RollgateError
from rollgate.core.metrics import Metrics
from rollgate.core.schemas import new_id
from rollgate.model_server.admission import Admission
from rollgate.model_server.backend import (
    AdmissionControl,
    Backend,
    PassthroughBackend,
    StreamingBackend,
)
from rollgate.model_server.calls import (
    Call,
    Choice,
    ResponseDone,
    ResponseEvent,
    ResponseFailed,
    ResponseStarted,
    TextDelta,
    apply_stop,
    forwarded,
    merge,
)
from rollgate.model_server.capture import CaptureStore
from rollgate.model_server.chat import PromptBuilder
from rollgate.model_server.output import (
    Generation,
    OutputParser,
    attach_tokens,
    build_response,
    message_only,
)
from rollgate.model_server.prepare import CallBuilder
from rollgate.model_server.response_store import ResponseStore
from rollgate.model_server.structured import JsonFormat
from rollgate.model_server.textstream import PlainTextGate
from rollgate.model_server.toolcalls import TOOL_CALL_FORMATS
from rollgate.model_server.wire import COMPONENT, ResponsesRequest, parse_request

log = logging.getLogger("rollgate.model_server.service")


class ModelService:
    """Every API dialect over one backend."""

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
        captures: CaptureStore | None = None,
        responses: ResponseStore | None = None,
        chat_template: str | None = None,
        tool_call_format: str = "hermes",
        reasoning_format: str | None = None,
    ):
        """`chat_template`: template text replacing the checkpoint's own (templates.resolve_chat_template
        reads a setting); `tool_call_format` (toolcalls.TOOL_CALL_FORMATS) and `reasoning_format`
        (output.REASONING_FORMATS; None: `<think>` tags) are how this model writes them."""
        self.backend = backend
        self.served_name = served_name
        self.model_names = {served_name, *aliases}
        self.default_max_output_tokens = default_max_output_tokens
        self.training_mode = training_mode
        self.metrics = metrics if metrics is not None else Metrics.off()
        self.token_backend = backend if isinstance(backend, Backend) and not self.forwards else None
        tokenizer = self.token_backend.tokenizer if self.token_backend is not None else None
        if tool_call_format not in TOOL_CALL_FORMATS:
            known = sorted(TOOL_CALL_FORMATS)
            raise ValueError(f"model.tool_call_format: unknown format {tool_call_format!r}; known: {known}")
        fmt = TOOL_CALL_FORMATS[tool_call_format]
        self.parser = OutputParser(fmt, reasoning_format)
        self.prompts = (
            PromptBuilder(tokenizer, chat_template=chat_template, tool_format=fmt) if tokenizer is not None else None
        )
        self.max_context = max_context_tokens or (self.token_backend.max_context if self.token_backend else None)
        self.admission = Admission(tokenizer, self.max_context)  # large prompts are prepared off the loop
        self.captures = captures if captures is not None else CaptureStore()
        self.responses = responses if responses is not None else ResponseStore()
        self.calls = CallBuilder(
            backend,
            self.prompts,
            self.parser,
            captures=self.captures,
            responses=self.responses,
            max_context=self.max_context,
            default_max_output_tokens=default_max_output_tokens,
            training_mode=training_mode,
        )

    def ready(self) -> bool:
        return self.backend.ready()

    async def aclose(self) -> None:
        self.admission.pool.close()
        await self.backend.aclose()

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "rollgate"}
                for name in sorted(self.model_names)
            ],
        }

    @property
    def forwards(self) -> bool:
        return isinstance(self.backend, PassthroughBackend)

    @property
    def streams(self) -> bool:
        return isinstance(self.backend, StreamingBackend) and not self.forwards

    # --- the Responses API ----------------------------------------------------------------------

    async def create(
        self, request: dict[str, Any], *, training: bool | None = None, session: str | None = None
    ) -> dict[str, Any]:
        try:
            if isinstance(self.backend, PassthroughBackend) and isinstance(request, dict):
                self._validate(request)  # a hosted API handles previous_response_id and text.format
                out = await self.backend.forward(request)
            else:
                call = await self.admission.run(request, self.prepare, request, training=training, session=session)
                [choice] = await self.complete(call, count=False)
                out = self._respond(call, choice)
                self._store(call, out)
        except RollgateError as exc:
            self._count("bad_request" if exc.status < 500 else "error")
            raise
        except Exception:
            self._count("error")
            raise
        self._count("ok")
        return out

    async def stream(
        self, request: dict[str, Any], *, training: bool | None = None, session: str | None = None
    ) -> AsyncIterator[ResponseEvent]:
        """The events of a Responses request as it is generated (calls.ResponseEvent: started,
        text deltas, done or failed; sse.py writes them as the API's server-sent events). The
        request is validated (and admitted) here, so its errors raise before the first event and
        keep their HTTP status. Closing the iterator early cancels the generation."""
        if not self.streams:
            # no token stream here: generate first, then the complete response
            response = await self.create(request, training=training, session=session)
            return _iterate([ResponseStarted(response), ResponseDone(response)])
        try:
            call = await self.admission.run(request, self.prepare, request, training=training, session=session)
            self._check_capacity()
        except RollgateError as exc:
            self._count("bad_request" if exc.status < 500 else "error")
            raise
        return self._events(call)

    def retrieve(self, response_id: str) -> dict[str, Any]:
        return self.responses.get(response_id).response

    # --- every dialect --------------------------------------------------------------------------

    def prepare(
        self,
        body: dict[str, Any],
        *,
        training: bool | None = None,
        session: str | None = None,
        api: str = "responses",
        n: int = 1,
        stop: tuple[str, ...] = (),
        output_format: JsonFormat | None = None,
    ) -> Call:
        """A Call from a Responses-shaped body (a dialect's request, converted). `output_format`:
        a dialect's structured output (a Responses body names it in `text.format`)."""
        req = self._validate(body)
        call = self.calls.build(req, body, training=training, session=session, output_format=output_format)
        call.api, call.n, call.stop = api, n, stop
        return call

    async def complete(self, call: Call, *, count: bool = True) -> list[Choice]:
        try:
            if isinstance(self.backend, PassthroughBackend):
                body = dict(call.body, model=call.req.model, stream=False)
                outs = await asyncio.gather(*(self.backend.forward(body) for _ in range(call.n)))
                choices = [forwarded(out) for out in outs]
            else:
                assert self.token_backend is not None
                gen = self.token_backend.generate
                if call.n == 1:  # the common case: no task per call (gather would make one)
                    gens = [await gen(call.prompt_ids, call.params_for(0), call.ctx)]
                else:
                    gens = list(
                        await asyncio.gather(
                            *(gen(call.prompt_ids, call.params_for(i), call.ctx) for i in range(call.n))
                        )
                    )
                choices = self._finish(call, gens)
        except RollgateError as exc:
            if count:
                self._count("bad_request" if exc.status < 500 else "error")
            raise
        except Exception:
            if count:
                self._count("error")
            raise
        if count:
            self._count("ok")
        return choices

    def complete_stream(self, call: Call) -> AsyncIterator[tuple[int, str | Choice]]:
        """(choice index, text delta) as text is generated, then (index, Choice) per choice. A
        backend that cannot stream, or stop sequences (found only in the whole text), answer the
        Choices alone. Admission errors raise here, before the first piece."""
        if not self.streams or call.stop:
            return self._whole(call)
        self._check_capacity()
        return self._pieces(call)

    # --- internals ------------------------------------------------------------------------------

    def _check_capacity(self) -> None:
        if isinstance(self.backend, AdmissionControl):
            self.backend.check_capacity()

    def _count(self, status: str) -> None:
        self.metrics.model_requests.labels(self.backend.name, status).inc()

    def _validate(self, body: dict[str, Any]) -> ResponsesRequest:
        req = parse_request(body)
        if req.model not in self.model_names:
            raise NotFound(
                f"model {req.model!r} is not served here; served: {sorted(self.model_names)}",
                component=COMPONENT,
                field="model",
            )
        if self.max_context is not None and (req.max_output_tokens or 0) > self.max_context:
            raise BadRequest(
                f"max_output_tokens: {req.max_output_tokens} is more than the model's context of "
                f"{self.max_context} tokens",
                component=COMPONENT,
                field="max_output_tokens",
            )
        return req

    def _finish(self, call: Call, gens: list[Generation]) -> list[Choice]:
        """Choices from generations: stop sequences applied, output parsed, tokens counted and
        captured."""
        choices = []
        for gen in gens:
            stop_seq = None
            if call.stop:
                gen, stop_seq = apply_stop(gen, call.stop, self.prompts.tokenizer if self.prompts else None)
            if call.params.json_format is not None:
                items = message_only(gen.text)
            else:
                declared = [t.name for t in call.req.tools or []]
                items = self.parser.parse(gen.text, declared, calls=call.tool_choice.mode != "none")
            choices.append(Choice(items, gen.finish_reason, gen, stop_seq))
        self.metrics.model_tokens.labels("in").inc(len(gens[0].prompt_ids or call.prompt_ids or []) * len(gens))
        self.metrics.model_tokens.labels("out").inc(sum(len(g.token_ids or []) for g in gens))
        prompt = gens[0].prompt_ids or call.prompt_ids
        if call.session is not None and call.chat is not None and prompt is not None:
            self.captures.record(
                call.session,
                api=call.api,
                model=call.req.model,
                messages=call.chat.messages,
                tools=call.chat.tools,
                prompt_ids=prompt,
                choices=[(c.items, c.gen) for c in choices if c.gen is not None and c.gen.token_ids is not None],
                extends=call.extends,
            )
        return choices

    async def _whole(self, call: Call) -> AsyncIterator[tuple[int, str | Choice]]:
        for i, choice in enumerate(await self.complete(call)):
            yield i, choice

    async def _pieces(self, call: Call) -> AsyncIterator[tuple[int, str | Choice]]:
        status = "cancelled"  # unless it gets to the end: the client went away
        assert isinstance(self.backend, StreamingBackend)
        try:
            streams = [
                self.backend.generate_stream(call.prompt_ids, call.params_for(i), call.ctx) for i in range(call.n)
            ]
            gens: list[Generation | None] = [None] * call.n
            async for i, piece in merge(streams):
                if isinstance(piece, str):
                    yield i, piece
                else:
                    gens[i] = piece
            if any(g is None for g in gens):
                raise RuntimeError(f"backend {self.backend.name!r} ended its stream without a generation")
            for i, choice in enumerate(self._finish(call, gens)):  # type: ignore[arg-type]
                yield i, choice
            status = "ok"
        except RollgateError as exc:
            status = "bad_request" if exc.status < 500 else "error"
            raise
        except Exception:
            status = "error"
            raise
        finally:
            self._count(status)

    def _respond(self, call: Call, choice: Choice, *, response_id: str | None = None, created_at: int | None = None):
        output = choice.items
        gen = choice.gen
        if call.training and gen is not None:
            attach_tokens(output, gen)
        return build_response(
            call.req,
            call.req.model,
            output,
            input_tokens=len((gen.prompt_ids if gen else None) or call.prompt_ids or []),
            output_tokens=len((gen.token_ids if gen else None) or []),
            finish_reason=choice.finish_reason,
            temperature=call.params.temperature,
            top_p=call.params.top_p,
            max_output_tokens=call.req.max_output_tokens,
            response_id=response_id,
            created_at=created_at,
            previous_response_id=call.previous_response_id,
        )

    async def _events(self, call: Call) -> AsyncIterator[ResponseEvent]:
        """A prepared call's events: the response as it starts, text deltas as the backend
        generates them, then the complete response (stored like `create`'s), or the failure."""
        response_id, created_at = new_id("resp"), int(time.time())
        yield ResponseStarted(self._respond(call, Choice([], "stop"), response_id=response_id, created_at=created_at))
        try:
            choice = None  # the finished Choice, after the text deltas
            gate = PlainTextGate(call.tags)
            pieces = self._pieces(call)
            async with contextlib.aclosing(pieces):
                async for _, piece in pieces:
                    if isinstance(piece, str):
                        if out := gate.feed(piece):
                            yield TextDelta(out)
                    else:
                        choice = piece
            assert choice is not None
            response = self._respond(call, choice, response_id=response_id, created_at=created_at)
            self._store(call, response)
        except Exception as exc:  # noqa: BLE001 - the stream has started: the failure is its last event
            if isinstance(exc, RollgateError):
                log.warning("stream %s failed: %s", response_id, exc)
            else:
                log.exception("stream %s failed", response_id)
            yield ResponseFailed(exc)
            return
        yield ResponseDone(response)

    def _store(self, call: Call, response: dict[str, Any]) -> None:
        if (call.req.model_extra or {}).get("store", True) is False:
            return
        req_input = call.req.input
        self.responses.put(
            response, [{"role": "user", "content": req_input}] if isinstance(req_input, str) else req_input
        )


async def _iterate(events: Iterable[ResponseEvent]) -> AsyncIterator[ResponseEvent]:
    for event in events:
        yield event
