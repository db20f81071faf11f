"""One error taxonomy for every part. Each error knows its kind, the component that raised it,
the offending input field (where there is one) and the HTTP status it maps to."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError

from rollgate.core.schemas import ErrorInfo, ErrorKind


class RollgateError(Exception):
    kind: ErrorKind = ErrorKind.internal
    status: int = 500
    code: str | None = None  # a finer type than `kind`, carried on the wire (error.code)

    def __init__(self, message: str, *, component: str = "rollgate", field: str | None = None):
        super().__init__(message)
        self.message = message
        self.component = component
        self.field = field

    def info(self) -> ErrorInfo:
        return ErrorInfo(kind=self.kind, message=self.message, component=self.component, field=self.field)

    def body(self) -> dict:
        err = self.info().model_dump(mode="json", exclude_none=True)
        if self.code is not None:
            err["code"] = self.code
        return {"error": err}

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"[{self.component}] {self.message}{where}"


class BadRequest(RollgateError):
    kind = ErrorKind.bad_request
    status = 400


class ContextExhausted(BadRequest):
    """The prompt does not fit the model's context window: a budget ran out, typed so that the
    agent can end the episode as truncated without reading error messages."""

    code = "context_exhausted"


class Unauthorized(RollgateError):
    kind = ErrorKind.bad_request
    status = 401


class NotFound(RollgateError):
    kind = ErrorKind.not_found
    status = 404


class PayloadTooLarge(RollgateError):
    kind = ErrorKind.bad_request
    status = 413


class CapacityError(RollgateError):
    """A bounded resource (session store, queue) is full: retry later."""

    kind = ErrorKind.capacity
    status = 503

    def __init__(self, message: str, *, component: str = "rollgate", retry_after_s: float = 1.0):
        super().__init__(message, component=component)
        self.retry_after_s = retry_after_s


class UpstreamError(RollgateError):
    """A dependency answered an error or could not be reached. `transient` errors may be retried."""

    kind = ErrorKind.upstream
    status = 502

    def __init__(self, message: str, *, component: str, transient: bool = False, status: int | None = None):
        super().__init__(message, component=component)
        self.transient = transient
        self.upstream_status = status


class UpstreamTimeout(UpstreamError):
    kind = ErrorKind.timeout
    status = 504

    def __init__(self, message: str, *, component: str):
        super().__init__(message, component=component, transient=True)


class ProtocolError(RollgateError):
    """A dependency answered something that breaks the wire contract."""

    kind = ErrorKind.protocol
    status = 502


class JudgeError(RollgateError):
    """An LLM judge gave an answer that cannot be parsed: never a reward of 0."""

    kind = ErrorKind.judge
    status = 502


def error_from_body(body: dict, *, component: str, status: int) -> RollgateError:
    """Rebuild a typed error from another service's error body (the inverse of .body())."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return UpstreamError(
            f"HTTP {status}: {str(body)[:300]}", component=component, transient=status >= 500, status=status
        )
    message = str(err.get("message", ""))
    comp = str(err.get("component", component))
    field = err.get("field")
    if status == 404:
        return NotFound(message, component=comp, field=field)
    if status == 413:
        return PayloadTooLarge(message, component=comp, field=field)
    if status == 401:
        return Unauthorized(message, component=comp, field=field)
    if status == 400 and err.get("code") == ContextExhausted.code:
        return ContextExhausted(message, component=comp, field=field)
    if 400 <= status < 500:
        return BadRequest(message, component=comp, field=field)
    if status == 503:
        return CapacityError(message, component=comp)
    return UpstreamError(message, component=comp, transient=status in (502, 503, 504), status=status)


# pydantic's ValidationError -> the field error every part reports ---------------------------


def field_of(error: Mapping[str, Any], *, prefix: str = "", skip: Collection[str] = (), indexed: bool = False) -> str:
    """One pydantic error's location as a dotted field path (`tasks.0.env`) under `prefix`,
    without the entries of `skip` (e.g. the union member tags pydantic adds: "str", "int").
    `indexed`: list positions as `[i]` (`input[0].content`, the style of the OpenAI APIs)."""
    path = prefix
    for p in error.get("loc", ()):
        part = str(p)
        if not part or part in skip:
            continue
        if indexed and isinstance(p, int):
            path += f"[{p}]"
        else:
            path += f".{part}" if path else part
    return path


def reason_of(error: Mapping[str, Any]) -> str:
    """One pydantic error's message, without pydantic's "Value error, " before a validator's own."""
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def validation_summary(exc: ValidationError, *, default: str = "body", limit: int = 5) -> str:
    """`field: reason` for up to `limit` errors, joined by "; " (what a model or a log reads)."""
    return "; ".join(f"{field_of(e) or default}: {reason_of(e)}" for e in exc.errors()[:limit])


def field_error(
    exc: ValidationError,
    *,
    component: str,
    prefix: str = "",
    default: str = "body",
    where: str = "",
    note: str = "",
    skip: Collection[str] = (),
    indexed: bool = False,
    deepest: bool = False,
    field: str | None = None,
    cls: type[RollgateError] = BadRequest,
) -> RollgateError:
    """The first error of a ValidationError (the deepest with `deepest`: with unions the deepest is
    the informative one) as a `cls` (a 400 by default) naming its field: message
    `{where}{field}: {reason}{note}`, field `field` or else the location (`default` if empty)."""
    errors = exc.errors()
    err = max(errors, key=lambda e: len(e.get("loc", ()))) if deepest else errors[0]
    loc = field_of(err, prefix=prefix, skip=skip, indexed=indexed) or default
    return cls(f"{where}{loc}: {reason_of(err)}{note}", component=component, field=field or loc)
