"""Schemathesis hooks of the OpenAPI test (loaded by its CLI through SCHEMATHESIS_HOOKS).

Three things the published documents say that schemathesis cannot read by itself:
- string formats of our own (`math-expression`: an answer the math environment parses), for
  which valid values are generated here;
- `x-semantic-checks` on an operation (rollgate.core.openapi.semantic_checks): rules JSON Schema
  cannot state (across fields, or against the server's state), each a 400 naming its field. A
  schema-valid request refused with exactly such a 400 is the documented behaviour, not a
  mismatch: that one failure (ST202, schema-valid request rejected) is dropped, and counted in
  the report's `filtered`;
- `x-keeps-resource` on a DELETE (cancelling a job keeps it readable): a read after it is no
  use-after-free (ST301), and is dropped the same way.
Every other failure stands.
And one thing a fuzzer must not do here: `wait=true` on a job's results stream holds the
response open until the job ends (ROLLGATE_ST_NO_WAIT=1 where no worker runs the jobs).
"""

from __future__ import annotations

import json
import os
import re

import schemathesis
from hypothesis import strategies as st

EXPRESSIONS = st.one_of(
    st.integers(-(10**9), 10**9).map(str),
    st.sampled_from(["3/4", "-7/2", "0.25", "x + 1", "2*x**2 - 3*x", "sqrt(2)", "\\frac{3}{4}", "y = 2*x"]),
)
schemathesis.openapi.format("math-expression", EXPRESSIONS)


def _pattern(field: str) -> re.Pattern[str]:
    return re.compile(re.escape(field).replace(r"\[\*\]", r"\[\d+\]"))


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    code = getattr(failure, "code", None)
    if code == "ST301":  # a read after a DELETE that keeps the resource readable, as its operation says
        method, _, path = str(getattr(failure, "operation", "")).partition(" ")
        deleted = case.operation.schema.raw_schema.get("paths", {}).get(path, {}).get(method.lower(), {})
        return "x-keeps-resource" not in deleted
    if code != "ST202" or response.status_code != 400:
        return True
    rules = case.operation.definition.raw.get("x-semantic-checks") or []
    try:
        field = json.loads(response.content)["error"]["field"]
    except (ValueError, KeyError, TypeError):
        return True
    documented = any(_pattern(rule["field"]).fullmatch(str(field)) for rule in rules)
    return not documented


@schemathesis.hook
def filter_query(context, query) -> bool:
    waits = bool(query) and str(query.get("wait")).lower() in ("true", "1")
    return not (waits and os.environ.get("ROLLGATE_ST_NO_WAIT") == "1")
