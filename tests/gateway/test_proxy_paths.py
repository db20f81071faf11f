"""The gateway routes /envs/<name>/<route> to an environment's replicas, where a family member's
name holds a "/" (reasoning_gym/chain_sum): the longer known name wins, an unknown one is a 404."""

from __future__ import annotations

import pytest

from rollgate.core.errors import NotFound
from rollgate.core.replicas import ReplicaSet
from rollgate.gateway.proxy import split_env_path

ENVS = {name: ReplicaSet(["http://127.0.0.1:9"]) for name in ("math", "reasoning_gym/chain_sum", "textarena/Sudoku")}


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("math/tools", ("math", "tools")),
        ("math/sessions/abc/tools/calculator", ("math", "sessions/abc/tools/calculator")),
        ("reasoning_gym/chain_sum/sessions", ("reasoning_gym/chain_sum", "sessions")),
        ("textarena/Sudoku/sessions/s1/verify", ("textarena/Sudoku", "sessions/s1/verify")),
    ],
)
def test_env_names_with_and_without_a_family(target, expected):
    assert split_env_path(target, ENVS) == expected


@pytest.mark.parametrize("target", ["chess/tools", "reasoning_gym/nope/tools", "reasoning_gym/chain_sum", "math"])
def test_unknown_environments_and_bare_names_are_not_found(target):
    with pytest.raises(NotFound) as exc:
        split_env_path(target, ENVS)
    assert exc.value.field == "env"
