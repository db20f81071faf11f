"""Logging set-up: plain or JSON lines; ids (job, trajectory, session) travel as `extra` fields
or are bound once per task with `log_context(...)` (a contextvar, so asyncio tasks and
`asyncio.to_thread` workers started inside the block inherit the ids)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

from rollgate.core import jsonutil

CONTEXT_FIELDS = ("job_id", "trajectory_id", "episode_id", "session_id", "task_id", "env", "component")

# Immutable mapping per context: set() replaces it, so a task never sees ids bound by a sibling.
_LOG_CONTEXT: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "rollgate_log_context",
    default={},  # noqa: B039 - never mutated: set() replaces it
)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Bind ids for every log record emitted inside the block (and in tasks it starts).

    `with log_context(job_id=job, trajectory_id=tid): ...`; None values are ignored, unknown
    names are a ValueError (a typo would otherwise silently drop the id)."""
    unknown = sorted(set(fields) - set(CONTEXT_FIELDS))
    if unknown:
        raise ValueError(f"unknown log context field(s) {unknown}; known: {', '.join(CONTEXT_FIELDS)}")
    bound = {**_LOG_CONTEXT.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _LOG_CONTEXT.set(bound)
    try:
        yield
    finally:
        _LOG_CONTEXT.reset(token)


def current_log_context() -> dict[str, Any]:
    return dict(_LOG_CONTEXT.get())


class LogContextFilter(logging.Filter):
    """Copies the bound ids onto each record; an explicit `extra=` on the call wins."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _LOG_CONTEXT.get().items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(time.time(), 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return jsonutil.dumps_str(out)


class PlainFormatter(logging.Formatter):
    """Human-readable lines; bound ids follow the message as key=value so grep finds them."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # before any traceback, not after it
        line = super().formatMessage(record)
        ids = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_FIELDS if getattr(record, k, None) is not None)
        return f"{line} [{ids}]" if ids else line


def setup_logging(level: str = "INFO", *, json_logs: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_logs else PlainFormatter())
    # On the handler, not a logger: handler filters see records from every logger that reaches it.
    handler.addFilter(LogContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
