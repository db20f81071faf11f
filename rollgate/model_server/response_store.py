"""Stored Responses: `GET /v1/responses/{id}` and `previous_response_id` (OpenAI keeps responses
unless the request says `store: false`). Bounded: the newest `max_entries` responses, each for at
most `ttl_s`; older ones answer 404 like an expired response."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from rollgate.core.errors import NotFound

COMPONENT = "model"


@dataclass
class Stored:
    response: dict[str, Any]
    input: list[Any]  # the request's input items, so a follow-up call can continue the conversation
    at: float


class ResponseStore:
    def __init__(self, *, max_entries: int = 1024, ttl_s: float = 3600.0):
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._items: OrderedDict[str, Stored] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, response: dict[str, Any], input_items: list[Any]) -> None:
        if self.max_entries <= 0:
            return
        self._items[response["id"]] = Stored(response, input_items, time.monotonic())
        self._items.move_to_end(response["id"])
        now = time.monotonic()
        while self._items:
            first = next(iter(self._items.values()))
            if len(self._items) <= self.max_entries and now - first.at <= self.ttl_s:
                break
            self._items.popitem(last=False)

    def get(self, response_id: str, *, field: str = "response_id") -> Stored:
        stored = self._items.get(response_id)
        if stored is None or time.monotonic() - stored.at > self.ttl_s:
            raise NotFound(
                f"no stored response {response_id!r}: unknown, sent with store=false, or expired "
                f"(responses are kept for {self.ttl_s:.0f}s, the newest {self.max_entries})",
                component=COMPONENT,
                field=field,
            )
        return stored
