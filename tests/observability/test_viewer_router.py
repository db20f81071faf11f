"""The viewer's server side over real HTTP: the page, its assets, and nothing else."""

from __future__ import annotations

import re
from importlib import resources

import httpx
import pytest
from fastapi import FastAPI

from rollgate.core.app import make_app
from rollgate.core.serving import serve_in_thread
from rollgate.gateway.ui import ASSETS, ui_router


@pytest.fixture(scope="module")
def base_url():
    app: FastAPI = make_app("viewer only", component="gateway")
    app.include_router(ui_router(api_base='https://example.invalid/gw"><x'))
    with serve_in_thread(app) as url:
        yield url


def test_page_is_served_with_a_strict_content_security_policy(base_url):
    r = httpx.get(base_url + "/ui")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert '<script src="/ui/static/app.js"' in r.text


def test_api_base_is_escaped_into_the_page(base_url):
    page = httpx.get(base_url + "/ui").text
    assert 'data-api-base="https://example.invalid/gw&quot;&gt;&lt;x"' in page
    assert "{{" not in page


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_assets_are_served_with_their_media_type(base_url, name):
    r = httpx.get(f"{base_url}/ui/static/{name}")
    assert r.status_code == 200
    assert r.headers["content-type"] == ASSETS[name]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.content == resources.files("rollgate.gateway.ui").joinpath("static", name).read_bytes()


def test_an_unknown_asset_is_a_404_naming_the_field(base_url):
    r = httpx.get(base_url + "/ui/static/index.html.bak")
    assert r.status_code == 404
    assert r.json()["error"]["kind"] == "not_found" and r.json()["error"]["field"] == "name"


@pytest.mark.parametrize(
    "path", ["/ui/static/..%2F__init__.py", "/ui/static/%2e%2e/__init__.py", "/ui/static/../__init__.py"]
)
def test_paths_outside_the_asset_table_never_reach_the_file_system(base_url, path):
    r = httpx.get(base_url + path)
    assert r.status_code == 404
    assert b"ui_router" not in r.content


def test_assets_load_nothing_from_other_origins():
    static = resources.files("rollgate.gateway.ui").joinpath("static")
    for name in ("index.html", *ASSETS):
        text = static.joinpath(name).read_text()
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), name
        assert "url(http" not in text and "@import" not in text, name
        assert ".innerHTML" not in text and "insertAdjacentHTML" not in text, name  # text only, never markup
