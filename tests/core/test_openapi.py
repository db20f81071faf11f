"""The shared pieces of every service's OpenAPI document (rollgate.core.openapi, core.app): the
error body on every error status, a complete `Allow` on a 405, and JSON integers validated as
their schema says. The whole documents are fuzzed in tests/architecture/test_openapi_schemathesis.py."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter, Request
from pydantic import BaseModel, ValidationError

from rollgate.core.app import make_app
from rollgate.core.auth import require_bearer
from rollgate.core.errors import NotFound
from rollgate.core.openapi import INT_MAX, errors, inline_schema, json_body, semantic_checks
from rollgate.core.schemas import MAX_JSON_INT, JsonInt


class Body(BaseModel):
    n: JsonInt | None = None


def app_with_routes():
    app = make_app("t", component="svc")
    require_bearer(app, "k", component="svc")
    router = APIRouter()

    @router.get("/things/{thing_id}", responses=errors(404))
    async def get_thing(thing_id: str):
        raise NotFound(f"no thing {thing_id}", component="svc", field="thing_id")

    @router.delete("/things/{thing_id}")
    async def drop_thing(thing_id: str):
        return {}

    @router.post("/things", openapi_extra={**json_body(Body), **semantic_checks(("n", "even"))})
    async def make_thing(request: Request):
        return {}

    app.include_router(router)  # an included router: FastAPI keeps it nested
    return app


async def test_every_error_status_is_documented_with_the_error_body_it_answers():
    app = app_with_routes()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        doc = (await c.get("/openapi.json")).json()
        auth = {"authorization": "Bearer k"}
        missing = await c.get("/things/x", headers=auth)
        unknown = await c.get("/nowhere", headers=auth)
        wrong = await c.put("/things/x", headers=auth)
    ref = {"$ref": "#/components/schemas/ErrorResponse"}
    get, post = doc["paths"]["/things/{thing_id}"]["get"], doc["paths"]["/things"]["post"]
    assert {"401", "404", "422", "500"} <= set(get["responses"])  # 422: FastAPI's own, re-described
    assert all(get["responses"][s]["content"]["application/json"]["schema"] == ref for s in ("401", "404", "422"))
    assert {"400", "413", "422"} <= set(post["responses"]) and post["security"] == [{"bearer": []}]
    assert post["x-semantic-checks"] == [{"field": "n", "rule": "even"}]
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "thing_id"
    assert unknown.status_code == 404 and unknown.json()["error"]["kind"] == "not_found"
    # each method is a route of its own: the 405 names both, not only the one Starlette tried
    assert wrong.status_code == 405 and wrong.headers["allow"] == "DELETE, GET"
    assert wrong.json()["error"]["component"] == "svc"


@pytest.mark.parametrize(
    ("value", "ok"), [(3, 3), (3.0, 3), (True, None), ("3", None), (2**53, None), (-(2**53) + 1, -(2**53) + 1)]
)
def test_a_json_integer_is_what_its_schema_says(value, ok):
    if ok is None:
        with pytest.raises(ValidationError):
            Body.model_validate({"n": value}, strict=True)
    else:
        assert Body.model_validate({"n": value}, strict=True).n == ok


def test_published_integers_carry_the_range_the_models_take():
    schema = inline_schema(Body)["properties"]["n"]["anyOf"][0]
    assert (schema["minimum"], schema["maximum"]) == (-MAX_JSON_INT, MAX_JSON_INT) == (-INT_MAX, INT_MAX)
