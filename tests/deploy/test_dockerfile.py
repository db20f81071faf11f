"""docker/Dockerfile at lint level (no Docker engine runs here: `docker build` is tried only where
one answers), and docker/healthcheck.py for real against a server on loopback."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest
from fastapi import FastAPI

from rollgate.core.serving import serve_in_thread
from tests.conftest import free_port
from tests.deploy.manifests import DOCKERFILE, ROOT, dockerfile_instructions

HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


def _instructions() -> list[tuple[str, str]]:
    return dockerfile_instructions(DOCKERFILE.read_text())


def _final_stage() -> list[tuple[str, str]]:
    ins = _instructions()
    last_from = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    return ins[last_from:]


def test_image_runs_rollgate_as_a_non_root_user():
    final = _final_stage()
    users = [arg for word, arg in final if word == "USER"]
    assert users, "the final stage sets no USER (it would run as root)"
    uid = users[-1].split(":")[0]
    assert uid not in ("0", "root")
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["rollgate"]
    assert json.loads(dict(final)["CMD"])[0] == "serve"


def test_image_declares_a_healthcheck_using_the_shipped_script():
    final = dict(_final_stage())
    assert "HEALTHCHECK" in final
    assert "/opt/rollgate/healthcheck.py" in final["HEALTHCHECK"]
    copies = [arg for word, arg in _final_stage() if word == "COPY"]
    assert any(c.split()[-2:] == ["docker/healthcheck.py", "/opt/rollgate/healthcheck.py"] for c in copies)


def test_torch_pin_matches_the_readme_install_and_the_project_range():
    """pyproject takes a range (users keep their torch); the README's install command and the
    image pin one version, the same one, which the range admits."""
    readme = set(re.findall(r'"torch==([\d.]+)"', (ROOT / "README.md").read_text()))
    image = set(re.findall(r'TORCH_SPEC="torch==([\d.]+)"', DOCKERFILE.read_text()))
    assert len(readme) == 1 and image == readme
    floor = re.search(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert floor and tuple(map(int, floor.group(1).split("."))) <= tuple(map(int, next(iter(readme)).split(".")))


def test_the_tiny_model_is_built_into_the_image_where_the_settings_look():
    text = " ".join(arg for _, arg in _final_stage())
    built = re.search(r"rollgate model tiny --out (\S+)", text)
    assert built, "the image must build the tiny model at build time (containers start offline)"
    assert f"ROLLGATE_MODEL__MODEL_PATH={built.group(1)}" in text


def test_the_build_time_model_command_exists_in_the_cli():
    """`rollgate model tiny --out DIR` is what the image runs while building."""
    from rollgate.cli import build_parser

    parser = build_parser("model")
    args = parser.parse_args(["model", "tiny", "--out", "/opt/rollgate/models/tiny"])
    assert callable(args._run)


def test_copied_sources_exist_and_pass_the_dockerignore():
    ignore = (ROOT / ".dockerignore").read_text().split()
    for word, arg in _final_stage():
        if word != "COPY" or arg.startswith("--from"):
            continue
        for src in arg.split()[:-1]:
            assert (ROOT / src).exists(), f"COPY {src}: missing in the build context"
            assert f"!{src}" in ignore or f"!{src.rstrip('/')}" in ignore, f".dockerignore drops {src}"


@pytest.mark.parametrize(
    "argv, env, port",
    [
        (["rollgate", "serve", "--role", "resources", "--env", "math", "--port", "8311"], {}, 8311),
        (["rollgate", "serve", "--role", "agent", "--port=9001"], {}, 9001),
        (["rollgate", "serve", "--role", "model"], {}, 8200),
        (["rollgate", "serve", "--role=resources", "--env", "code"], {}, 8300),
        (["rollgate", "serve"], {}, 8000),
        (["rollgate", "serve", "--role", "agent", "--port", "8100"], {"ROLLGATE_PORT": "7000"}, 7000),
    ],
)
def test_healthcheck_finds_the_port_of_the_running_role(argv, env, port):
    spec = importlib.util.spec_from_file_location("rollgate_docker_healthcheck", HEALTHCHECK)
    healthcheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(healthcheck)
    assert healthcheck.port_from(argv, env) == port


def _run_healthcheck(port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"ROLLGATE_PORT": str(port), "PATH": "/usr/bin:/bin"},
    )


def test_healthcheck_passes_on_a_healthy_server_and_fails_otherwise():
    app = FastAPI()
    healthy = {"ok": True}

    @app.get("/healthz")
    async def healthz():
        from fastapi.responses import JSONResponse

        return JSONResponse({"ok": healthy["ok"]}, status_code=200 if healthy["ok"] else 503)

    with serve_in_thread(app) as url:
        port = int(url.rsplit(":", 1)[1])
        assert _run_healthcheck(port).returncode == 0
        healthy["ok"] = False
        failed = _run_healthcheck(port)
        assert failed.returncode == 1 and "503" in failed.stderr
    assert _run_healthcheck(free_port()).returncode == 1  # nothing listening


@pytest.mark.slow
def test_docker_build_where_an_engine_runs():
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode:
        pytest.skip("no Docker engine here; the Dockerfile is checked at lint level above")
    out = subprocess.run(
        [docker, "build", "-f", str(DOCKERFILE), "-t", "rollgate:test", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
