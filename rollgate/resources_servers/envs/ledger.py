"""`ledger`: look up account balances with a tool and report their total.

The row carries the question and a `seed`; the environment draws the ledger (accounts and their
balances) from the seed at seed time, so no balance and no answer is ever in the row the model
sees. One tool, `balance(account)`; the reward is 1.0 for the exact total on a final line
`Answer: N`, else 0.0. A small example of a complete environment in one module: the tool, the
state, the verifier and the task generator (`example_tasks`), registered by one entry point line.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel

from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, final_response_text, tool
from rollgate.verifiers.answers import extract_final_answer

ACCOUNTS = ["cash", "payroll", "rent", "travel", "supplies", "marketing", "legal", "reserve"]
INSTRUCTIONS = (
    "You can read the company ledger with the `balance` tool. Look up each account the question "
    "names, add the balances, and end with a line `Answer: <total>`."
)


def draw_ledger(seed: int) -> dict[str, int]:
    rng = random.Random(f"ledger:{seed}")
    return {name: rng.randint(-500, 5000) for name in ACCOUNTS}


def draw_question(seed: int) -> list[str]:
    rng = random.Random(f"ledger-question:{seed}")
    return sorted(rng.sample(ACCOUNTS, rng.randint(2, 4)))


class LedgerState(BaseModel):
    balances: dict[str, int]
    asked: list[str]  # the accounts the question names: the total of these is the answer
    lookups: int = 0


class LedgerEnv(Environment):
    name = "ledger"
    description = "Look up account balances with a tool and report their exact total."
    State = LedgerState
    reverify = "answer"  # verify reads the seeded ledger and the final answer only

    def seed(self, task: TaskRow, rng: random.Random) -> LedgerState:
        if task.seed is None:
            raise ValueError("a ledger row needs `seed` (it draws the ledger and the question)")
        return LedgerState(balances=draw_ledger(task.seed), asked=draw_question(task.seed))

    @tool
    def balance(self, state: LedgerState, account: str) -> str:
        """The balance of one account, in whole dollars."""
        name = account.strip().lower()
        if name not in state.balances:
            raise ToolError(f"no account {account!r}; accounts: {', '.join(ACCOUNTS)}")
        state.lookups += 1
        return str(state.balances[name])

    def verify(self, state: LedgerState, request: VerifyRequest) -> VerifyResult:
        expected = sum(state.balances[a] for a in state.asked)
        answer = extract_final_answer(final_response_text(request))
        correct = answer is not None and answer.strip().replace(",", "") == str(expected)
        return VerifyResult(
            reward=1.0 if correct else 0.0,
            metrics={"expected": expected, "answer": answer, "lookups": state.lookups},
        )


def example_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` ledger rows, deterministic for `seed`; `gold` holds the lookups and the right answer."""
    rng = random.Random(f"ledger-rows:{seed}")
    rows = []
    for i in range(n):
        row_seed = rng.getrandbits(31)
        asked, balances = draw_question(row_seed), draw_ledger(row_seed)
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "system", "content": INSTRUCTIONS},
                        {"role": "user", "content": f"What is the total balance of {', '.join(asked)}?"},
                    ]
                },
                "env": "ledger",
                "task_id": f"ledger-{seed}-{i:03d}",
                "seed": row_seed,
                "gold": {
                    "calls": [{"name": "balance", "arguments": {"account": a}} for a in asked],
                    "response": f"Answer: {sum(balances[a] for a in asked)}",
                },
            }
        )
    return rows
