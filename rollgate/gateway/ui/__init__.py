"""The trajectory viewer: one static page (HTML + vanilla JS + CSS shipped as package data, the
charts drawn as inline SVG by charts.js: no CDN, the page works offline)
that reads the gateway's own JSON API from the browser. The server side only serves files;
every byte of trajectory data reaches the page through the authenticated /v1/rollouts routes.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from rollgate.core.errors import NotFound

# name -> media type; a fixed table, so no request path ever reaches the file system.
ASSETS: dict[str, str] = {
    "app.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "views.js": "text/javascript; charset=utf-8",
    "roles.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# The page loads nothing from other origins (no CDN) and runs no inline script: model output is
# shown in it, so a strict policy is the second line of defence after textContent-only rendering.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
    "referrer-policy": "no-referrer",
}


@cache
def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def ui_router(*, prefix: str = "/ui", api_base: str = "") -> APIRouter:
    """GET {prefix} (the page) and GET {prefix}/static/{name}. `api_base` is prepended to the
    page's API calls (empty: the gateway that serves the page)."""
    router = APIRouter(tags=["viewer"], include_in_schema=False)
    page = (
        _asset("index.html")
        .replace(b"{{API_BASE}}", html.escape(api_base.rstrip("/")).encode())
        .replace(b"{{PREFIX}}", html.escape(prefix).encode())
    )

    @router.get(prefix)
    async def viewer_page() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=HEADERS)

    @router.get(prefix + "/static/{name}")
    async def viewer_asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise NotFound(f"no viewer asset named {name!r}", component="gateway", field="name")
        return Response(_asset(name), media_type=media_type, headers=HEADERS)

    return router
