"""Server-sent events of the Responses API, with the official event types and fields (what the
openai SDK's stream parser expects). This module only encodes: the service's public event stream
(`ModelService.stream`, calls.ResponseEvent) becomes the API's events.

`StreamWriter` builds the events of a response while it is generated: `response.created` at once,
the message's `output_text` deltas as the service releases plain text, and everything else (the
rest of the message, reasoning and function_call items) once the response is complete;
`response.completed` / `response.incomplete` carries the same response object a non-streaming
call returns."""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import RollgateError
from rollgate.core.schemas import new_id
from rollgate.model_server.calls import ResponseDone, ResponseEvent, ResponseFailed, ResponseStarted, TextDelta

log = logging.getLogger("rollgate.model_server.sse")


def _stub(item: dict[str, Any]) -> dict[str, Any]:
    """An item as announced by output_item.added: in progress, no content yet."""
    out = copy.deepcopy(item)
    out["status"] = "in_progress"
    if out["type"] in ("message", "reasoning"):
        out["content"] = []
    elif out["type"] == "function_call":
        out["arguments"] = ""
    return out


def _in_progress(response: dict[str, Any]) -> dict[str, Any]:
    return dict(response, status="in_progress", output=[], usage=None, incomplete_details=None)


class StreamWriter:
    """The events of one response, numbered in order."""

    def __init__(self) -> None:
        self.seq = 0
        self.sent = ""  # message text streamed so far
        self.message_id: str | None = None  # set once the message is announced (first delta)

    def ev(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def start(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        start = _in_progress(response)
        return [self.ev("response.created", response=start), self.ev("response.in_progress", response=start)]

    def text(self, out: str) -> list[dict[str, Any]]:
        """Events for newly released message text."""
        if not out:
            return []
        self.sent += out
        events = []
        if self.message_id is None:  # parse_text puts a message that starts before any tag first
            self.message_id = new_id("msg")
            item = {
                "type": "message",
                "id": self.message_id,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events += [
                self.ev("response.output_item.added", output_index=0, item=item),
                self.ev(
                    "response.content_part.added", item_id=self.message_id, output_index=0, content_index=0, part=part
                ),
            ]
        events.append(
            self.ev(
                "response.output_text.delta",
                item_id=self.message_id,
                output_index=0,
                content_index=0,
                delta=out,
                logprobs=[],
            )
        )
        return events

    def finish(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        """The remaining events, ending with the complete response."""
        events: list[dict[str, Any]] = []
        output = response["output"]
        first = 0
        if self.message_id is not None:
            if output and output[0]["type"] == "message":
                output[0]["id"] = self.message_id
                events += self._message_events(0, output[0], sent=self.sent)
                first = 1
            else:  # cannot happen with parse_text's ordering; the final response stays authoritative
                log.error("streamed message text but the response does not start with a message")
        for idx in range(first, len(output)):
            events += self._item_events(idx, output[idx])
        final = "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
        events.append(self.ev(final, response=response))
        return events

    def error(self, exc: BaseException) -> dict[str, Any]:
        if isinstance(exc, RollgateError):
            err = exc.body()["error"]
            return self.ev("error", code=err.get("kind"), message=err.get("message", ""), param=err.get("field"))
        return self.ev("error", code="internal", message="the model server failed while generating", param=None)

    def _message_events(self, idx: int, item: dict[str, Any], sent: str = "") -> list[dict[str, Any]]:
        """A message's events; `sent`: text of its first part already streamed as deltas."""
        item_id = item["id"]
        events: list[dict[str, Any]] = []
        for ci, part in enumerate(item["content"]):
            text = part.get("text", "")
            announced = ci == 0 and self.message_id == item_id
            if not announced:
                events.append(
                    self.ev(
                        "response.content_part.added",
                        item_id=item_id,
                        output_index=idx,
                        content_index=ci,
                        part=dict(part, text=""),
                    )
                )
            already = sent if announced else ""
            if not text.startswith(already):
                log.error("streamed text is not a prefix of the final message text")
                already = text
            if text[len(already) :]:
                events.append(
                    self.ev(
                        "response.output_text.delta",
                        item_id=item_id,
                        output_index=idx,
                        content_index=ci,
                        delta=text[len(already) :],
                        logprobs=[],
                    )
                )
            events.append(
                self.ev(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=idx,
                    content_index=ci,
                    text=text,
                    logprobs=[],
                )
            )
            events.append(
                self.ev("response.content_part.done", item_id=item_id, output_index=idx, content_index=ci, part=part)
            )
        events.append(self.ev("response.output_item.done", output_index=idx, item=item))
        return events

    def _item_events(self, idx: int, item: dict[str, Any]) -> list[dict[str, Any]]:
        item_id = item["id"]
        events = [self.ev("response.output_item.added", output_index=idx, item=_stub(item))]
        if item["type"] == "message":
            return events + self._message_events(idx, item)
        if item["type"] == "function_call":
            events += [
                self.ev(
                    "response.function_call_arguments.delta", item_id=item_id, output_index=idx, delta=item["arguments"]
                ),
                self.ev(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=idx,
                    name=item["name"],
                    arguments=item["arguments"],
                ),
            ]
        elif item["type"] == "reasoning":
            for ci, part in enumerate(item.get("content") or []):
                events += [
                    self.ev(
                        "response.reasoning_text.delta",
                        item_id=item_id,
                        output_index=idx,
                        content_index=ci,
                        delta=part["text"],
                    ),
                    self.ev(
                        "response.reasoning_text.done",
                        item_id=item_id,
                        output_index=idx,
                        content_index=ci,
                        text=part["text"],
                    ),
                ]
        events.append(self.ev("response.output_item.done", output_index=idx, item=item))
        return events


def encode(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + jsonutil.dumps(event) + b"\n\n"


async def api_events(stream: AsyncIterator[ResponseEvent]) -> AsyncIterator[dict[str, Any]]:
    """The Responses API's stream events for the service's events. Closing this closes `stream`
    (and so cancels the generation)."""
    writer = StreamWriter()
    try:
        async for event in stream:
            if isinstance(event, ResponseStarted):
                for out in writer.start(event.response):
                    yield out
            elif isinstance(event, TextDelta):
                for out in writer.text(event.text):
                    yield out
            elif isinstance(event, ResponseDone):
                for out in writer.finish(event.response):
                    yield out
            elif isinstance(event, ResponseFailed):
                yield writer.error(event.error)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
