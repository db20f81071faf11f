"""Readers for the deployment files (compose.yaml, docker/Dockerfile, k8s/), shared by the tests."""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
K8S = ROOT / "k8s"
SHIPPED_ENVS = ["math", "workplace", "game2048", "wordle", "code"]
ROLLGATE_ROLES = {"gateway", "agent", "model", "resources", "sandbox"}
# what .env must set for compose.yaml (the three secrets)
COMPOSE_SECRETS = {"ROLLGATE_API_KEY": "k", "ROLLGATE_REDIS_PASSWORD": "p", "ROLLGATE_SANDBOX_TOKEN": "t"}


def gen_deploy():
    """scripts/gen_deploy.py as a module (the generator of compose.yaml and k8s/base)."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_deploy as module

    return module


_VAR = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} on every string of a parsed file."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op and op.endswith("?"):
            raise KeyError(f"{name}: {arg}")
        return arg if op else ""

    return _VAR.sub(sub, value)


def compose_services(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """compose.yaml's services with YAML anchors merged and variables filled from `env`."""
    return interpolate(yaml.safe_load(COMPOSE.read_text()), env)["services"]


def rollgate_services(services: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Services running the Rollgate image's `serve` (not redis, vllm, prometheus)."""
    return {n: s for n, s in services.items() if (s.get("command") or [None])[0] == "serve"}


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def base_docs() -> list[dict[str, Any]]:
    """Every object of k8s/base, from the files its kustomization lists (a fresh copy each call)."""
    return copy.deepcopy(_base_docs())


@functools.cache
def _base_docs() -> list[dict[str, Any]]:
    kust = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    return [d for f in kust["resources"] for d in load_docs(K8S / "base" / f)]


@functools.cache
def kustomize_cmd() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    kubectl = shutil.which("kubectl")
    if kubectl and subprocess.run([kubectl, "kustomize", "--help"], capture_output=True, timeout=60).returncode == 0:
        return [kubectl, "kustomize"]
    return None


def kustomize_build(cmd: list[str], path: Path) -> list[dict[str, Any]]:
    return copy.deepcopy(_kustomize_build(tuple(cmd), path))


@functools.cache
def _kustomize_build(cmd: tuple[str, ...], path: Path) -> list[dict[str, Any]]:
    out = subprocess.run([*cmd, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kustomize build {path} failed: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, with continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out
