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
from rollgate.model_server.toolcalls import TOOL_CALL_FORMATS, ToolCallFormat
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


_PROBE_TOOL = {"name": "probe_tool", "description": "d", "parameters": {"type": "object", "properties": {}}}


class PromptBuilder:
    """Renders chats with a chat template (the tokenizer's own, or `chat_template` instead) and
    builds prompt ids. A template that does not render tools (rendering with tools gives the same
    text as without) gets them from the tool-call format instead: a system prompt listing them,
    earlier calls written into the assistant's text and tool results into user turns."""

    def __init__(self, tokenizer, *, chat_template: str | None = None, tool_format: ToolCallFormat | None = None):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.tool_format = tool_format or TOOL_CALL_FORMATS["hermes"]
        self.eos_id: int = tokenizer.eos_token_id
        self.eos_text: str = tokenizer.eos_token
        self.vocab_size = len(tokenizer)
        self.drift = 0  # tails whose rendered prefix did not match (a template that is not prefix-stable)
        probe = [{"role": "user", "content": "x"}]
        try:
            self.native_tools = self._apply(probe, [_PROBE_TOOL], True) != self._apply(probe, [], True)
        except Exception:  # noqa: BLE001 - a template that rejects the probe: trust it with tools
            log.warning("the chat template failed on a probe chat; assuming it renders tools itself")
            self.native_tools = True

    def _apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            chat_template=self.chat_template,
        )

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], generation_prompt: bool) -> str:
        if not self.native_tools:
            messages, tools = inline_tools(messages, tools, self.tool_format), []
        try:
            return self._apply(messages, tools, generation_prompt)
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


def inline_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], fmt: ToolCallFormat
) -> list[dict[str, Any]]:
    """A chat for a template without tool support: the tools listed in the system prompt, the
    assistant's calls in its text and tool results in user turns, all in `fmt`'s conventions.
    Prefix-stable: the conversion of a chat's first messages is a prefix of the whole one's."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            text = m.get("content") or ""
            calls = [fmt.call_text(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls", [])]
            turn = {k: v for k, v in m.items() if k != "tool_calls"}
            turn["content"] = "\n".join([text, *calls] if text else calls)
            out.append(turn)
        elif m["role"] == "tool":
            result = fmt.result_text(m.get("content") or "")
            if out and out[-1].get("tool_results"):  # one user turn holds consecutive results
                out[-1] = dict(out[-1], content=out[-1]["content"] + "\n" + result)
            else:
                out.append({"role": "user", "content": result, "tool_results": True})
        else:
            out.append(dict(m))
    for m in out:
        m.pop("tool_results", None)
    if tools:
        listing = fmt.system_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = dict(out[0], content=f"{out[0]['content']}\n\n{listing}")
        else:
            out.insert(0, {"role": "system", "content": listing})
    return out
