"""A recipe's data: train and held-out tasks from the environment's generator (disjoint splits),
gold demonstrations played through Rollgate's agent loop, and their SFT export.

Gold demonstrations are real episodes: the scripted model backend replays each row's `gold`
(its tool calls, then its final reply) against the real environment, which runs the tools and
verifies the answer. Only episodes the verifier accepts reach the SFT file, which is written by
the same code as `rollgate export --format sft`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.rows import parse_row
from rollgate.core.schemas import Trajectory
from rollgate.core.settings import AgentSettings, Settings
from rollgate.model_server.scripted import SCRIPT_KEY
from rollgate.model_server.tiny import split_assistant_turns
from rollgate.trainer_adapters.exports import ExportStats, export
from rollgate.trainer_adapters.recipes.config import RecipeConfig

log = logging.getLogger("rollgate.train")


@dataclass
class RecipeData:
    train_rows: list[dict[str, Any]]
    heldout_rows: list[dict[str, Any]]
    train_file: Path
    heldout_file: Path
    sft_file: Path
    sft_stats: ExportStats | None = None


def agent_settings(cfg: RecipeConfig) -> AgentSettings:
    a = cfg.agent
    return AgentSettings(
        max_turns=a.max_turns,
        max_output_tokens=a.max_output_tokens,
        max_output_tokens_per_call=a.max_output_tokens_per_call,
        model_timeout_s=a.model_timeout_s,
        episode_timeout_s=a.episode_timeout_s,
    )


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(jsonutil.dumps(r) + b"\n" for r in rows))


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [jsonutil.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def generate_tasks(cfg: RecipeConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train rows, held-out rows): the generator's train and eval splits, which never share a
    task (a task's split is a hash of its content: rollgate.resources_servers.families.splits)."""
    from rollgate.resources_servers.registry import default_registry

    spec = default_registry().get(cfg.env)
    if spec.tasks is None:
        raise BadRequest(f"environment {cfg.env!r} cannot generate tasks", component="train", field="env")
    train = spec.tasks(cfg.train_tasks, cfg.seed, None, "train")
    heldout = spec.tasks(cfg.heldout_tasks, cfg.seed, None, "eval")
    return train, heldout


def gold_script(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The scripted backend's turns for a row's gold path: each tool call, then the final reply."""
    gold = row.get("gold")
    if not isinstance(gold, dict) or not isinstance(gold.get("response"), str):
        return None
    calls = [c for c in gold.get("calls") or [] if isinstance(c, dict) and isinstance(c.get("name"), str)]
    return [{"call": c} for c in calls] + [{"text": gold["response"]}]


def scripted_row(row: dict[str, Any], script: list[dict[str, Any]]) -> dict[str, Any]:
    out = json.loads(json.dumps(row))
    rcp = out["responses_create_params"]
    rcp["metadata"] = {**(rcp.get("metadata") or {}), SCRIPT_KEY: json.dumps(script)}
    return out


async def gold_episodes(rows: list[dict[str, Any]], settings: Settings, env: str, concurrency: int) -> list[Trajectory]:
    from rollgate.agent_server.agent import RunContext
    from rollgate.stack import local_stack

    stack = local_stack(settings, envs=[env])
    limit = asyncio.Semaphore(concurrency)

    async def one(i: int, row: dict[str, Any]) -> Trajectory:
        task = parse_row(row, env=env, row_index=i, where=f"gold[{i}]", component="train")
        async with limit:
            return await stack.agent.run(task, RunContext(job_id="gold", sample_index=0, policy_version="gold"))

    try:
        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(rows))))
    finally:
        await stack.aclose()


def collect_gold(
    cfg: RecipeConfig, rows: list[dict[str, Any]], out_dir: Path, *, concurrency: int = 32
) -> tuple[Path, ExportStats]:
    """Play every row's gold path through the agent loop (scripted backend, no tokenizer needed:
    the SFT file holds text), write the trajectories, and export the accepted ones as SFT."""
    scripted = [(row, gold_script(row)) for row in rows]
    playable = [scripted_row(row, s) for row, s in scripted if s is not None]
    if not playable:
        raise BadRequest(f"no {cfg.env} task row carries a `gold` path to demonstrate", component="train", field="gold")
    base = Settings()
    settings = base.model_copy(
        update={
            "model": base.model.model_copy(update={"backend": "scripted", "model_path": ""}),
            "agent": agent_settings(cfg),
            "envs": [cfg.env],
        }
    )
    trajs = asyncio.run(gold_episodes(playable, settings, cfg.env, concurrency))
    traj_file = out_dir / "gold_trajectories.jsonl"
    traj_file.write_bytes(b"".join(jsonutil.dumps(t.model_dump(mode="json")) + b"\n" for t in trajs))
    sft_file = out_dir / "sft.jsonl"
    stats = export(traj_file, sft_file, "sft")  # `rollgate export --format sft`: verified episodes only
    if stats.written == 0:
        raise BadRequest(
            f"none of the {len(trajs)} gold episodes of {cfg.env} was accepted by its verifier",
            component="train",
            field="gold",
        )
    log.info("gold demonstrations: %d of %d episodes verified and exported to %s", stats.written, len(trajs), sft_file)
    return sft_file, stats


def template_tools(env: str) -> list[dict[str, Any]]:
    """The environment's tools as the model server hands them to the chat template (what every
    served prompt shows), so SFT sequences are the very tokens the policy sees when it acts."""
    from rollgate.resources_servers.registry import default_registry

    schemas = default_registry().get(env).env_class.tool_schemas()
    out = []
    for t in schemas:
        fn = t.get("function", t)
        item = {"name": fn["name"]}
        if fn.get("description"):
            item["description"] = fn["description"]
        item["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append(item)
    return out


def tokenize_messages(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, builder: Any = None
) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of a conversation, rendered by the model server's own prompt builder
    (a template without tool support gets the tools, calls and results written into its turns,
    as when it is served) and tokenized piece by piece as it is served: each stretch of context up
    to an assistant turn's opener on its own, each assistant turn (through its end-of-turn token)
    on its own. The mask is 1 on assistant tokens only. `builder`: a PromptBuilder of `tokenizer`
    to reuse (making one probes the chat template)."""
    from rollgate.model_server.chat import PromptBuilder

    text = (builder or PromptBuilder(tokenizer)).render(messages, tools, False)
    return split_assistant_turns(tokenizer, text, tail=False)


def tokenize_records(
    tokenizer: Any, records: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[tuple[list[int], list[int]]]:
    """tokenize_messages of every SFT record, with one prompt builder."""
    from rollgate.model_server.chat import PromptBuilder

    builder = PromptBuilder(tokenizer)
    return [tokenize_messages(tokenizer, r["messages"], tools, builder=builder) for r in records]


def sft_records(path: Path) -> list[dict[str, Any]]:
    return read_rows(path)
