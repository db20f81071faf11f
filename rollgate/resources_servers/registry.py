"""The shipped environments by name. Imports are lazy so one environment's dependencies
(e.g. the sandbox of `code`) never load for another."""

from __future__ import annotations

import importlib

from rollgate.core.errors import NotFound
from rollgate.resources_servers.base import Environment

# name -> "module:Class"
ENVIRONMENTS: dict[str, str] = {
    "math": "rollgate.resources_servers.envs.math_env:MathEnv",
    "workplace": "rollgate.resources_servers.envs.workplace:WorkplaceEnv",
    "game2048": "rollgate.resources_servers.envs.game2048:Game2048Env",
    "wordle": "rollgate.resources_servers.envs.wordle:WordleEnv",
    "code": "rollgate.resources_servers.envs.code:CodeEnv",
}


def env_names() -> list[str]:
    return sorted(ENVIRONMENTS)


def load_env(name: str, **kwargs) -> Environment:
    target = ENVIRONMENTS.get(name)
    if target is None:
        raise NotFound(f"unknown environment {name!r}; known: {', '.join(env_names())}", component="env", field="env")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)
