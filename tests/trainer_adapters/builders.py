"""Hand-built trajectories with exact, readable token layouts (token-in/token-out contiguous).

Token ids are chosen so that each part is recognisable in assertions: prompt tokens 1xx,
generations 2xx/3xx/4xx per turn, spliced tool tokens 9xx."""

from __future__ import annotations

from typing import Any

from rollgate.core.schemas import Outcome, Trajectory, Turn

PROMPT = [101, 102, 103, 104]
GEN = [[201, 202, 203], [301, 302], [401, 402, 403, 404]]
SPLICE = [[901, 902, 903], [911, 912]]  # tool output + next turn header, between calls
LOGPROBS = [[-0.5, -0.25, -0.125], [-1.5, -0.75], [-0.1, -0.2, -0.3, -0.4]]

ROW = {
    "responses_create_params": {
        "input": [{"role": "system", "content": "Use the calculator."}, {"role": "user", "content": "What is 12*7+3?"}],
        "tools": [
            {
                "type": "function",
                "name": "calculator",
                "description": "Evaluate an expression.",
                "parameters": {
                    "type": "object",
                    "properties": {"expression": {"type": "string"}},
                    "required": ["expression"],
                },
            }
        ],
    },
    "expected_answer": "87",
    "env": "math",
    "task_id": "m1",
}

MESSAGES: list[dict[str, Any]] = [
    *ROW["responses_create_params"]["input"],
    {"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": '{"expression": "12*7"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "84"},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "add three"}]},
    {"type": "function_call", "call_id": "c2", "name": "calculator", "arguments": '{"expression": "84+3"}'},
    {"type": "function_call_output", "call_id": "c2", "output": "87"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The answer is 87."}]},
]


def three_turns(prompt: list[int] = PROMPT) -> list[Turn]:
    turns = []
    history = list(prompt)
    for k in range(3):
        if k > 0:
            history = history + SPLICE[k - 1]
        turns.append(
            Turn(
                prompt_token_ids=list(history),
                generation_token_ids=GEN[k],
                generation_log_probs=LOGPROBS[k],
                finish_reason="stop",
                weight_version="v3",
            )
        )
        history = history + GEN[k]
    return turns


def trajectory(
    outcome: Outcome = Outcome.completed,
    *,
    reward: float | None = 1.0,
    components: dict[str, float] | None = None,
    turns: list[Turn] | None = None,
    group: str = "g1",
    index: int = 0,
    messages: list[dict[str, Any]] | None = None,
) -> Trajectory:
    error = None
    if not outcome.has_reward:
        reward, components = None, None
        error = {"kind": "upstream", "message": "env down", "component": "env"}
    if reward is not None and components is None:
        components = {"correct": reward * 0.75, "format": reward * 0.25}
    return Trajectory(
        trajectory_id=f"traj_{group}_{index}",
        group_id=group,
        sample_index=index,
        job_id="job1",
        task={"env": "math", "task_id": "m1", "seed": 7, "row": ROW},
        policy={"model": "tiny", "policy_version": "v3", "sampling": {"temperature": 1.0}},
        messages=MESSAGES if messages is None else messages,
        turns=three_turns() if turns is None else turns,
        reward=reward,
        reward_components=components,
        outcome=outcome,
        error=error,
        metrics={"turns": 3},
        timings={"total_s": 1.5, "model_s": 1.0},
    )
