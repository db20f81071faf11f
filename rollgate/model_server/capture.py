"""Token capture for clients that never echo token ids (Chat Completions and Messages harnesses).

A capture session is named by the caller (the URL prefix `/capture/{session}/v1/...` or the
header `x-rollgate-session`). For each call of a session the store keeps what a trainer needs
(prompt ids, and per choice the generated ids, log-probs, finish reason, weight version) and
what the next call needs to extend it: the call's rendered-chat messages in a normalized form and
the assistant message each choice became. A later call whose messages start with a recorded
call's messages followed by one of its choices' assistant message is anchored on that call's
exact ids (prompt + generation), so the history is never re-tokenized.

Memory is bounded: at most `max_sessions` sessions (least recently used evicted), `max_calls`
calls per session (later calls are served but counted as `dropped_calls`), `max_tokens` token ids
held over all sessions (oldest sessions evicted), and `ttl_s` since a session's last call. Ids are
held as `array('i')` (4 bytes each, not a Python int per token)."""

from __future__ import annotations

import json
import logging
import re
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rollgate.core.errors import BadRequest, NotFound
from rollgate.model_server.output import Generation

log = logging.getLogger("rollgate.model_server.capture")

SESSION_HEADER = "x-rollgate-session"
SESSION_PATTERN = "^[A-Za-z0-9._:-]{1,128}$"
_SESSION_RE = re.compile(SESSION_PATTERN)
MATCH_WINDOW = 8  # recent calls a new call may extend (retries and sub-agents branch off older ones)


def check_session(session: str, *, field: str = "session") -> str:
    if not _SESSION_RE.fullmatch(session):
        raise BadRequest(
            f"{field}: a capture session is 1-128 characters of letters, digits and . _ : -, got {session[:40]!r}",
            component="model",
            field=field,
        )
    return session


def _args_key(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


def message_key(msg: dict[str, Any]) -> tuple:
    """What must be equal for a client's message to be the one we recorded. Tool-call ids and
    reasoning are left out: clients rewrite or drop them, and neither changes the sampled ids."""
    calls = tuple(
        (c.get("function", {}).get("name"), _args_key(c.get("function", {}).get("arguments")))
        for c in msg.get("tool_calls") or ()
    )
    return (msg.get("role"), (msg.get("content") or "").strip(), calls)


def assistant_message(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat message a client sends back for these Responses output items."""
    text = "".join(p.get("text", "") for i in items if i.get("type") == "message" for p in i.get("content") or [])
    calls = [
        {"type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}
        for i in items
        if i.get("type") == "function_call"
    ]
    return {"role": "assistant", "content": text, "tool_calls": calls}


@dataclass
class CapturedChoice:
    generation_token_ids: array
    generation_log_probs: array
    finish_reason: str
    weight_version: str | None
    key: tuple  # message_key of the assistant message it became
    # the assistant message itself (content, tool calls): a black-box harness episode's readable
    # transcript and final answer come from it (rollgate.agent_server.harness)
    message: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "generation_token_ids": self.generation_token_ids.tolist(),
            "generation_log_probs": self.generation_log_probs.tolist(),
            "finish_reason": self.finish_reason,
            "weight_version": self.weight_version,
            "message": self.message,
        }


@dataclass
class CapturedCall:
    index: int
    api: str
    model: str
    created_at: float
    prompt_token_ids: array
    extends: int | None  # the call whose prompt + generation this prompt starts with
    choices: list[CapturedChoice]
    keys: tuple  # message_key of every prompt message
    tools_key: str

    def tokens(self) -> int:
        return len(self.prompt_token_ids) + sum(len(c.generation_token_ids) for c in self.choices)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "api": self.api,
            "model": self.model,
            "created_at": self.created_at,
            "extends": self.extends,
            "prompt_token_ids": self.prompt_token_ids.tolist(),
            "choices": [c.to_json() for c in self.choices],
        }


@dataclass
class _Session:
    calls: list[CapturedCall] = field(default_factory=list)
    dropped_calls: int = 0
    tokens: int = 0
    touched: float = field(default_factory=time.monotonic)
    next_index: int = 0


@dataclass
class Anchor:
    message: int  # index in the new chat of the assistant message that the call produced
    ids: list[int]  # that call's prompt ids + the choice's generated ids
    call: int


class CaptureStore:
    def __init__(
        self, *, max_sessions: int = 4096, max_calls: int = 512, max_tokens: int = 16_000_000, ttl_s: float = 3600.0
    ):
        self.max_sessions = max_sessions
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.ttl_s = ttl_s
        self.tokens = 0
        self.evicted = 0
        self.late_calls = 0  # calls of a session after its owner popped it: served, not recorded
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        # Sessions popped by their owner (name -> when), so a call still in flight when a harness
        # was killed cannot bring the session back (bounded like the sessions, kept for ttl_s).
        self._closed: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def _live(self, name: str) -> _Session | None:
        s = self._sessions.get(name)
        if s is not None and time.monotonic() - s.touched > self.ttl_s:
            self._drop(name)
            return None
        return s

    def _drop(self, name: str) -> _Session:
        s = self._sessions.pop(name)
        self.tokens -= s.tokens
        return s

    def _expire(self) -> None:
        now = time.monotonic()
        while self._sessions:
            name, s = next(iter(self._sessions.items()))
            over = len(self._sessions) > self.max_sessions or self.tokens > self.max_tokens
            if not over and now - s.touched <= self.ttl_s:
                return
            if over:
                self.evicted += 1
                log.warning("capture store full: evicting session %s (%d calls)", name, len(s.calls))
            self._drop(name)

    def anchor(self, session: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Anchor | None:
        """The recorded call (most recent first) that `messages` extend, if any."""
        s = self._live(session)
        if s is None:
            return None
        tools_key = _tools_key(tools)
        keys = [message_key(m) for m in messages]
        for call in reversed(s.calls[-MATCH_WINDOW:]):
            n = len(call.keys)
            if call.tools_key != tools_key or len(keys) <= n or tuple(keys[:n]) != call.keys:
                continue
            for choice in call.choices:
                if keys[n] == choice.key:
                    ids = call.prompt_token_ids.tolist() + choice.generation_token_ids.tolist()
                    return Anchor(n, ids, call.index)
        return None

    def record(
        self,
        session: str,
        *,
        api: str,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        prompt_ids: list[int],
        choices: list[tuple[list[dict[str, Any]], Generation]],
        extends: int | None,
    ) -> int | None:
        """Record one call; its index in the session, or None when the session is full or closed."""
        closed = self._closed.get(session)
        if closed is not None:
            if time.monotonic() - closed <= self.ttl_s:
                self.late_calls += 1
                return None
            del self._closed[session]
        s = self._live(session)
        if s is None:
            s = self._sessions[session] = _Session()
        self._sessions.move_to_end(session)
        s.touched = time.monotonic()
        if len(s.calls) >= self.max_calls:
            s.dropped_calls += 1
            return None
        call = CapturedCall(
            index=s.next_index,
            api=api,
            model=model,
            created_at=time.time(),
            prompt_token_ids=array("i", prompt_ids),
            extends=extends,
            choices=[
                CapturedChoice(
                    array("i", gen.token_ids or []),
                    array("d", gen.log_probs or [0.0] * len(gen.token_ids or [])),
                    gen.finish_reason,
                    gen.weight_version,
                    message_key(msg),
                    msg,
                )
                for msg, gen in ((assistant_message(items), gen) for items, gen in choices)
            ],
            keys=tuple(message_key(m) for m in messages),
            tools_key=_tools_key(tools),
        )
        s.next_index += 1
        s.calls.append(call)
        s.tokens += call.tokens()
        self.tokens += call.tokens()
        self._expire()
        return call.index

    def get(self, session: str) -> dict[str, Any]:
        s = self._live(check_session(session))
        if s is None:
            raise NotFound(
                f"no capture session {session!r} (never used, expired after {self.ttl_s:.0f}s, or evicted)",
                component="model",
                field="session",
            )
        return _session_json(session, s)

    def pop(self, session: str) -> dict[str, Any]:
        """Read and forget a session. Its later calls are served but not recorded (for ttl_s): the
        owner has taken the record, and a late call must not leave a session behind."""
        self._closed[check_session(session)] = time.monotonic()
        self._closed.move_to_end(session)
        while len(self._closed) > self.max_sessions:
            self._closed.popitem(last=False)
        out = self.get(session)
        self._drop(session)
        return out


def _tools_key(tools: list[dict[str, Any]]) -> str:
    return json.dumps(tools, sort_keys=True, ensure_ascii=False)


def _session_json(name: str, s: _Session) -> dict[str, Any]:
    return {
        "session": name,
        "calls": [c.to_json() for c in s.calls],
        "dropped_calls": s.dropped_calls,
        "tokens": s.tokens,
    }
