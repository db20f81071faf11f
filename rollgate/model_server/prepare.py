"""From a validated Responses request to a `Call` ready for the backend: the checks that refuse
what the backend cannot enforce (structured output, a forced tool_choice), the chained history
of `previous_response_id`, the prompt ids (token-in/token-out, capture sessions) and the
sampling parameters."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from rollgate.core.errors import BadRequest, ContextExhausted
from rollgate.model_server.backend import CallContext, ConstrainedBackend, PassthroughBackend, SamplingParams
from rollgate.model_server.calls import Call
from rollgate.model_server.capture import CaptureStore
from rollgate.model_server.chat import PromptBuilder, build_chat
from rollgate.model_server.output import OutputParser
from rollgate.model_server.response_store import ResponseStore
from rollgate.model_server.structured import JsonFormat, check_enforceable, responses_format, schema_format
from rollgate.model_server.toolcalls import ToolChoice, constraint_for, parse_tool_choice
from rollgate.model_server.wire import COMPONENT, ResponsesRequest, parse_items

TRAINING_KEY = "rollgate_training"
SESSION_KEY = "rollgate_session"
IGNORE_EOS_KEY = "rollgate_ignore_eos"  # benchmarking: generate exactly max_output_tokens
TRUE = {"1", "true", "yes", "on"}
FALSE = {"", "0", "false", "no", "off"}
SEED_PATTERN = "^[+-]?[0-9]+$"  # metadata.rollgate_seed (published in OpenAPI: rollgate.model_server.api_docs)
_SEED_RE = re.compile(SEED_PATTERN)


class CallBuilder:
    """Builds the Calls of one service (its backend, prompt builder and stores)."""

    def __init__(
        self,
        backend: Any,
        prompts: PromptBuilder | None,
        parser: OutputParser,
        *,
        captures: CaptureStore,
        responses: ResponseStore,
        max_context: int | None,
        default_max_output_tokens: int,
        training_mode: bool,
    ):
        self.backend = backend
        self.forwards = isinstance(backend, PassthroughBackend)
        self.prompts = prompts
        self.parser = parser
        self.captures = captures
        self.responses = responses
        self.max_context = max_context
        self.default_max_output_tokens = default_max_output_tokens
        self.training_mode = training_mode

    def build(
        self,
        req: ResponsesRequest,
        body: dict[str, Any],
        *,
        training: bool | None,
        session: str | None,
        output_format: JsonFormat | None,
    ) -> Call:
        fmt = output_format or responses_format((req.model_extra or {}).get("text"))
        choice = parse_tool_choice(req.tool_choice, [t.name for t in req.tools or []])
        constrained = self.backend if isinstance(self.backend, ConstrainedBackend) else None
        ignore_eos = not self.forwards and _flag(req.metadata or {}, IGNORE_EOS_KEY, strict=True)
        if fmt is not None and not self.forwards:  # enforced by the backend or refused, never ignored
            tools = bool(req.tools) and choice.mode != "none"
            check_enforceable(
                fmt,
                constrained,
                self.backend.name,
                tools=tools,
                ignore_eos=f"metadata.{IGNORE_EOS_KEY}" if ignore_eos else None,
            )
        if choice.forced and not self.forwards:
            self._check_forced(req, choice, constrained, ignore_eos)
        if isinstance(body, dict) and body.get("previous_response_id") is not None:
            req = self._continue(req, body)
        return self._prepare(req, body, training, session, fmt, choice)

    def _check_forced(
        self, req: ResponsesRequest, choice: ToolChoice, backend: ConstrainedBackend | None, ignore_eos: bool
    ) -> None:
        """A 400 unless this backend can enforce a forced tool_choice for this request."""
        if backend is None or self.prompts is None:
            raise BadRequest(
                f"tool_choice: the {self.backend.name!r} backend cannot enforce {choice.mode!r} (it has no "
                'constrained decoding); accepted here: "auto" or "none"; '
                "serve the model with the local or vllm backend",
                component=COMPONENT,
                field="tool_choice",
            )
        if ignore_eos:
            raise BadRequest(
                f"metadata.{IGNORE_EOS_KEY}: cannot be combined with a forced tool_choice (the call ends the turn)",
                component=COMPONENT,
                field=f"metadata.{IGNORE_EOS_KEY}",
            )
        for i, tool in enumerate(req.tools or []):
            if choice.mode == "required" or tool.name == choice.name:
                params = tool.schema_for_template()["parameters"]
                backend.check_format(schema_format(params, "tool_choice", f"tools[{i}].parameters"))

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
        choice: ToolChoice | None = None,
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
            tool_call=(
                constraint_for(self.parser.tool_format, chat.tools, choice, self.prompts.encode)
                if choice is not None and choice.forced and chat is not None and self.prompts is not None
                else None
            ),
        )
        ctx = CallContext(req, items, session or meta.get(SESSION_KEY) or _session_key(raw_items, req.input))
        call = Call(req, body, prompt_ids, params, ctx, training, chat=chat, session=session, extends=extends)
        call.tool_choice, call.tags = choice or ToolChoice("auto"), self.parser.tags
        return call


def _flag(meta: dict[str, str], key: str, *, strict: bool = False) -> bool:
    value = meta.get(key, "").lower()
    if strict and value not in TRUE | FALSE:
        raise BadRequest(
            f'metadata.{key}: must be "true" or "false", got {meta[key]!r}',
            component=COMPONENT,
            field=f"metadata.{key}",
        )
    return value in TRUE


def _session_key(raw_items: list[dict[str, Any]] | None, raw: Any) -> str:
    """Requests of one episode share their first item: hashing it keeps an episode on one replica."""
    first = raw_items[0] if raw_items else raw
    return hashlib.sha1(repr(first).encode()).hexdigest()
