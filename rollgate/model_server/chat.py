"""From Responses items to the model's prompt tokens.

Items become chat messages (consecutive reasoning / function_call / assistant message items of one
model call merge into one assistant turn), which the model's own chat template renders.

Token-in/token-out: when the input holds the previous call's `prompt_token_ids` +
`generation_token_ids`, the prompt is those exact ids followed by the tokens of the newly
templated tail only. The tail is the rendered chat after the end-of-turn token that closes that
assistant turn; if the generation did not end with that token (it was cut at max tokens) the
token is added once, so the boundary is exactly what the template renders."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.model_server.wire import (
    COMPONENT,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
)

log = logging.getLogger("rollgate.model_server.chat")


@dataclass
class Chat:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    # index of the assistant message built from the last item that carries token ids, and those ids
    anchor_message: int | None = None
    anchor_ids: list[int] | None = None


def _arguments(raw: str) -> Any:
    # The template renders arguments as JSON; keep a string that is not JSON as a string.
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def build_chat(request: ResponsesRequest, items: list[InputItem], raw_items: list[dict[str, Any]] | None) -> Chat:
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    anchor_message: int | None = None
    anchor_ids: list[int] | None = None
    open_assistant = False  # are we still inside one model call's assistant turn?
    for i, item in enumerate(items):
        raw = raw_items[i] if raw_items is not None else {}
        if isinstance(item, MessageItem) and item.role != "assistant":
            role = "system" if item.role == "developer" else item.role
            messages.append({"role": role, "content": item.text()})
            open_assistant = False
            continue
        if isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "content": item.text(), "tool_call_id": item.call_id})
            open_assistant = False
            continue
        # a model-produced item: part of an assistant turn
        if not open_assistant:
            messages.append({"role": "assistant", "content": ""})
            open_assistant = True
        turn = messages[-1]
        if isinstance(item, ReasoningItem):
            turn["reasoning_content"] = (turn.get("reasoning_content") or "") + item.text()
        elif isinstance(item, FunctionCallItem):
            turn.setdefault("tool_calls", []).append(
                {
                    "type": "function",
                    "id": item.call_id,
                    "function": {"name": item.name, "arguments": _arguments(item.arguments)},
                }
            )
        elif isinstance(item, MessageItem):
            turn["content"] += item.text()
        if "generation_token_ids" in raw and "prompt_token_ids" in raw:
            anchor_message = len(messages) - 1
            anchor_ids = list(raw["prompt_token_ids"]) + list(raw["generation_token_ids"])
    tools = [t.schema_for_template() for t in (request.tools or [])]
    return Chat(messages, tools, anchor_message, anchor_ids)


class PromptBuilder:
    """Renders chats with a Hugging Face tokenizer's chat template and builds prompt ids."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.eos_id: int = tokenizer.eos_token_id
        self.eos_text: str = tokenizer.eos_token
        self.vocab_size = len(tokenizer)
        self.drift = 0  # tails whose rendered prefix did not match (a template that is not prefix-stable)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools or None, tokenize=False, add_generation_prompt=generation_prompt
            )
        except Exception as exc:  # a template error is the request's fault (e.g. a role it rejects)
            raise BadRequest(
                f"the chat template cannot render this input: {exc}", component=COMPONENT, field="input"
            ) from None

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, chat: Chat) -> tuple[list[int], bool]:
        """The prompt token ids, and whether they extend a previous call's ids (token-in)."""
        full = self.render(chat.messages, chat.tools, True)
        if chat.anchor_message is None or chat.anchor_ids is None:
            return self.encode(full), False
        bad = [t for t in chat.anchor_ids if t >= self.vocab_size]
        if bad:
            raise BadRequest(
                f"token id {bad[0]} is outside the model's vocabulary of {self.vocab_size}",
                component=COMPONENT,
                field="input.generation_token_ids",
            )
        prefix = self.render(chat.messages[: chat.anchor_message + 1], chat.tools, False)
        cut = prefix.rfind(self.eos_text)
        if cut < 0:
            raise BadRequest(
                "the chat template does not end an assistant turn with the end-of-turn token; "
                "token-in/token-out needs it",
                component=COMPONENT,
                field="input",
            )
        cut += len(self.eos_text)
        if full[:cut] != prefix[:cut]:
            self.drift += 1
            log.warning("chat template is not prefix-stable for this input; the tail may be inexact")
        ids = list(chat.anchor_ids)
        if not ids or ids[-1] != self.eos_id:
            ids.append(self.eos_id)  # the generation was cut before its end-of-turn token
        return ids + self.encode(full[cut:]), True
