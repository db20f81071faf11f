"""The model service over one backend: validate a request, build the prompt (token-in/token-out
when the history carries token ids, or when a capture session holds the previous call), call the
backend and answer. Every API dialect goes through `prepare` and `complete` / `complete_stream`
(see calls.py for the internal form); the Responses API, the form the others convert to, is
answered here (`create`, `stream`, `retrieve`). HTTP-free, so the embedded shape calls it in
process and the app only adds routes."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

from rollgate.core.errors import BadRequest, ContextExhausted, NotFound, RollgateError
from rollgate.core.metrics import Metrics
from rollgate.model_server import sse
from rollgate.model_server.admission import Admission
from rollgate.model_server.backend import Backend, CallContext, PassthroughBackend, SamplingParams
from rollgate.model_server.calls import Call, Choice, apply_stop, forwarded, merge
from rollgate.model_server.capture import CaptureStore
from rollgate.model_server.chat import PromptBuilder, build_chat
from rollgate.model_server.output import Generation, attach_tokens, build_response, message_only, parse_text
from rollgate.model_server.response_store import ResponseStore
from rollgate.model_server.structured import JsonFormat, check_enforceable, responses_format
from rollgate.model_server.wire import COMPONENT, ResponsesRequest, parse_items, parse_request

log = logging.getLogger("rollgate.model_server.service")

TRAINING_KEY = "rollgate_training"
SESSION_KEY = "rollgate_session"
IGNORE_EOS_KEY = "rollgate_ignore_eos"  # benchmarking: generate exactly max_output_tokens
TRUE = {"1", "true", "yes", "on"}
FALSE = {"", "0", "false", "no", "off"}
SEED_PATTERN = "^[+-]?[0-9]+$"  # metadata.rollgate_seed (published in OpenAPI: rollgate.model_server.api_docs)
_SEED_RE = re.compile(SEED_PATTERN)


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
    ):
        self.backend = backend
        self.served_name = served_name
        self.model_names = {served_name, *aliases}
        self.default_max_output_tokens = default_max_output_tokens
        self.training_mode = training_mode
        self.metrics = metrics if metrics is not None else Metrics.off()
        tokenizer = getattr(backend, "tokenizer", None)
        self.prompts = PromptBuilder(tokenizer) if tokenizer is not None else None
        self.max_context = max_context_tokens or getattr(backend, "max_context", None)
        self.admission = Admission(tokenizer, self.max_context)  # large prompts are prepared off the loop
        self.captures = captures if captures is not None else CaptureStore()
        self.responses = responses if responses is not None else ResponseStore()

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
        return hasattr(self.backend, "forward")

    # --- the Responses API ----------------------------------------------------------------------

    async def create(
        self, request: dict[str, Any], *, training: bool | None = None, session: str | None = None
    ) -> dict[str, Any]:
        try:
            if self.forwards and isinstance(request, dict):
                self._validate(request)  # a hosted API handles previous_response_id and text.format
                out = await self.backend.forward(request)  # type: ignore[union-attr]
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
    ) -> AsyncIterator[dict[str, Any]]:
        """The Responses stream events of a request. The request is validated (and admitted) here,
        so its errors raise before the first event and keep their HTTP status; later failures
        become an `error` event. Closing the iterator early cancels the generation."""
        if self.forwards or not hasattr(self.backend, "generate_stream"):
            # no token stream here: generate first, then stream the complete response's events
            return _iterate(sse.events(await self.create(request, training=training, session=session)))
        try:
            call = await self.admission.run(request, self.prepare, request, training=training, session=session)
            self._check_capacity()
        except RollgateError as exc:
            self._count("bad_request" if exc.status < 500 else "error")
            raise
        return sse.stream_call(self, call)

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
        fmt = output_format or responses_format((req.model_extra or {}).get("text"))
        if fmt is not None and not self.forwards:  # enforced by the backend or refused, never ignored
            ignore_eos = _flag(req.metadata or {}, IGNORE_EOS_KEY, strict=True)
            tools = bool(req.tools) and req.tool_choice != "none"
            check_enforceable(
                fmt, self.backend, tools=tools, ignore_eos=f"metadata.{IGNORE_EOS_KEY}" if ignore_eos else None
            )
        if isinstance(body, dict) and body.get("previous_response_id") is not None:
            req = self._continue(req, body)
        call = self._prepare(req, body, training, session, fmt)
        call.api, call.n, call.stop = api, n, stop
        return call

    async def complete(self, call: Call, *, count: bool = True) -> list[Choice]:
        try:
            if self.forwards:
                body = dict(call.body, model=call.req.model, stream=False)
                outs = await asyncio.gather(*(self.backend.forward(body) for _ in range(call.n)))  # type: ignore[union-attr]
                choices = [forwarded(out) for out in outs]
            else:
                gen = self.backend.generate  # type: ignore[union-attr]
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
        if self.forwards or not hasattr(self.backend, "generate_stream") or call.stop:
            return self._whole(call)
        self._check_capacity()
        return self._pieces(call)

    # --- internals ------------------------------------------------------------------------------

    def _check_capacity(self) -> None:
        check = getattr(self.backend, "check_capacity", None)
        if check is not None:
            check()

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

    def _continue(self, req: ResponsesRequest, body: dict[str, Any]) -> ResponsesRequest:
        """previous_response_id: the stored call's input and output come before this input."""
        if not isinstance(body["previous_response_id"], str):
            raise BadRequest(
                "previous_response_id: must be a string", component=COMPONENT, field="previous_response_id"
            )
        prev = self.responses.get(body["previous_response_id"], field="previous_response_id")
        new = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else list(req.input)
        return req.model_copy(update={"input": [*prev.input, *prev.response["output"], *new]})

    def _prepare(
        self,
        req: ResponsesRequest,
        body: dict[str, Any],
        training: bool | None,
        session: str | None,
        fmt: JsonFormat | None = None,
    ) -> Call:
        items = parse_items(req.input)
        raw_items = req.input if isinstance(req.input, list) else None
        meta = req.metadata or {}
        training = bool(training or self.training_mode or _flag(meta, TRAINING_KEY))
        seed = req.seed
        if "rollgate_seed" in meta:
            if not _SEED_RE.fullmatch(meta["rollgate_seed"]):
                raise BadRequest(
                    "metadata.rollgate_seed: must be an integer", component=COMPONENT, field="metadata.rollgate_seed"
                )
            if seed is None:
                seed = int(meta["rollgate_seed"])
        max_tokens = req.max_output_tokens or self.default_max_output_tokens
        prompt_ids: list[int] | None = None
        chat = None
        extends = None
        if self.prompts is not None:
            chat = build_chat(req, items, raw_items)
            if session is not None:
                anchor = self.captures.anchor(session, chat.messages, chat.tools)
                if anchor is not None:
                    extends = anchor.call
                    if chat.anchor_message is None:  # echoed token ids win: they are the client's own
                        chat.anchor_message, chat.anchor_ids = anchor.message, anchor.ids
            prompt_ids, _ = self.prompts.prompt_ids(chat)
            if self.max_context is not None:
                room = self.max_context - len(prompt_ids)
                if room <= 0:
                    raise ContextExhausted(
                        f"the prompt has {len(prompt_ids)} tokens; the model's context is {self.max_context}",
                        component=COMPONENT,
                        field="input",
                    )
                max_tokens = min(max_tokens, room)
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            seed=seed,
            ignore_eos=_flag(meta, IGNORE_EOS_KEY, strict=True),
            json_format=fmt if not self.forwards else None,
        )
        ctx = CallContext(req, items, session or meta.get(SESSION_KEY) or _session_key(raw_items, req.input))
        return Call(req, body, prompt_ids, params, ctx, training, chat=chat, session=session, extends=extends)

    def _finish(self, call: Call, gens: list[Generation]) -> list[Choice]:
        """Choices from generations: stop sequences applied, output parsed, tokens counted and
        captured."""
        choices = []
        for gen in gens:
            stop_seq = None
            if call.stop:
                gen, stop_seq = apply_stop(gen, call.stop, self.prompts.tokenizer if self.prompts else None)
            items = message_only(gen.text) if call.params.json_format is not None else parse_text(gen.text)
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
        try:
            streams = [
                self.backend.generate_stream(call.prompt_ids, call.params_for(i), call.ctx) for i in range(call.n)
            ]  # type: ignore[union-attr]
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
        )

    def _store(self, call: Call, response: dict[str, Any]) -> None:
        if (call.req.model_extra or {}).get("store", True) is False:
            return
        req_input = call.req.input
        self.responses.put(
            response, [{"role": "user", "content": req_input}] if isinstance(req_input, str) else req_input
        )


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
