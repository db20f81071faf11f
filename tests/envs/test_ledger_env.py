"""The ledger environment: the gold path (its lookups, then the exact total) scores 1.0, a wrong
total 0.0, an unknown account is an error output the model can read, and the answer never
travels in the row."""

from __future__ import annotations

import pytest

from rollgate.core.schemas import VerifyRequest
from rollgate.core.session_store import MemorySessionStore
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.envs.ledger import LedgerEnv, draw_ledger, example_tasks
from rollgate.resources_servers.registry import default_registry


@pytest.fixture
def rt() -> EnvRuntime:
    return EnvRuntime(LedgerEnv(), MemorySessionStore())


async def test_gold_path_scores_one_and_a_wrong_total_zero(rt):
    for row in example_tasks(8, seed=5):
        sid = (await rt.seed(row)).session_id
        for call in row["gold"]["calls"]:
            out = await rt.call_tool(sid, call["name"], call["arguments"])
            assert not out.is_error and int(out.output) == draw_ledger(row["seed"])[call["arguments"]["account"]]
        gold = await rt.verify(sid, VerifyRequest(response=row["gold"]["response"]))
        assert gold.reward == 1.0 and gold.metrics["lookups"] == len(row["gold"]["calls"])
        wrong_total = int(row["gold"]["response"].split()[-1]) + 1
        wrong = await rt.verify(sid, VerifyRequest(response=f"Answer: {wrong_total}"))
        assert wrong.reward == 0.0


async def test_unknown_account_is_an_error_output(rt):
    [row] = example_tasks(1, seed=1)
    sid = (await rt.seed(row)).session_id
    out = await rt.call_tool(sid, "balance", {"account": "bitcoin"})
    assert out.is_error and "no account 'bitcoin'" in out.output


def test_rows_are_deterministic_and_hold_no_balance():
    a, b = example_tasks(4, seed=2), example_tasks(4, seed=2)
    assert a == b and a != example_tasks(4, seed=3)
    for row in a:
        visible = str(row["responses_create_params"])
        assert row["gold"]["response"].split()[-1] not in visible


def test_registered_by_its_entry_point():
    spec = default_registry().get("ledger")
    assert spec.available and spec.tool_names() == ["balance"] and spec.tasks is not None
