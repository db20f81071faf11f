"""What a probe is, what it sees of a task, and where probes come from.

A probe turns one task row into the turns of the scripted backend (rollgate/model_server/scripted.py:
`{"text": ...}` or `{"call": {"name", "arguments"}}`, the last turn repeating until the episode
ends). Probes are plugins of the entry point group `rollgate.audit_probes`; each entry names a
`Probe` subclass (built with no arguments) or an instance. Rollgate's own are listed in
`builtin.SHIPPED` and registered in its pyproject.toml the same way.

Kinds: `floor` (answers nothing useful: what any reply should at least be worth), `reference`
(the gold path: what the environment pays for a solution), `exploit` (should score no more than
the floor) and `format` (the gold answer written another way: should score like the reference).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar

log = logging.getLogger("rollgate.audit")

GROUP = "rollgate.audit_probes"
KINDS = ("floor", "reference", "exploit", "format")
IDK = "I don't know."  # the reply of a probe that gives no answer
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "input_text", "text": ...}]
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _gold_answer(row: dict[str, Any]) -> str | None:
    """The gold final answer's value, where the row carries one."""
    if isinstance(row.get("expected_answer"), str | int | float) and str(row["expected_answer"]).strip():
        return str(row["expected_answer"]).strip()
    gold = row.get("gold")
    response = gold.get("response") if isinstance(gold, dict) else None
    if isinstance(response, str):
        tagged = re.findall(r"<answer>(.*?)</answer>", response, re.DOTALL)
        if tagged:
            return tagged[-1].strip()
        lines = re.findall(r"Answer:\s*(.+)", response)
        if lines:
            return lines[-1].strip()
    return None


@dataclass(frozen=True)
class ProbeContext:
    """One task as a probe sees it."""

    env: str
    row: dict[str, Any]
    instructions: str  # the system messages' text
    question: str  # the user messages' text
    tools: list[dict[str, Any]] = field(default_factory=list)  # [{"name", "parameters", ...}]
    gold: str | None = None  # the gold final answer's value
    max_turns: int = 8

    @classmethod
    def of(
        cls, env: str, row: dict[str, Any], tools: list[dict[str, Any]], max_turns: int, *, gold: str | None = None
    ) -> ProbeContext:
        raw = (row.get("responses_create_params") or {}).get("input")
        messages = [{"role": "user", "content": raw}] if isinstance(raw, str) else (raw or [])
        system = [_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") != "user"]
        user = [_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        gold = gold if gold is not None else _gold_answer(row)
        return cls(env, row, "\n".join(system), "\n".join(user), list(tools), gold, max_turns)

    @property
    def numbers(self) -> list[str]:
        return list(dict.fromkeys(_NUMBER.findall(self.question)))

    @property
    def words(self) -> list[str]:
        return re.findall(r"[A-Za-z]{3,}", self.question)

    @property
    def tags_answer(self) -> bool:
        """Whether the task asks for `<answer>...</answer>` (reasoning-gym style) over `Answer: ...`."""
        return "<answer>" in self.question or "<answer>" in self.instructions

    def final(self, value: str) -> str:
        """A final-answer line in the form the task asks for."""
        return f"<answer>{value}</answer>" if self.tags_answer else f"Answer: {value}"

    def first_tool_call(self) -> dict[str, Any] | None:
        """A call of the first tool with small valid arguments (its schema's minimum)."""
        from rollgate.model_server.scripted import example_value

        if not self.tools:
            return None
        first = self.tools[0]
        return {"name": first["name"], "arguments": example_value(first.get("parameters") or {})}


class Probe:
    """Base of a probe. Subclasses set `name`, `kind`, `description` and define `script`;
    `applies` returns None when the probe fits the task, else why not."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "exploit"
    description: ClassVar[str] = ""
    uses_gold: ClassVar[bool] = False

    def applies(self, ctx: ProbeContext) -> str | None:
        if self.uses_gold and ctx.gold is None:
            return "the task carries no gold answer"
        return None

    def script(self, ctx: ProbeContext) -> list[dict[str, Any]]:
        raise NotImplementedError


def check_script(script: Any) -> list[dict[str, Any]]:
    """A probe's turns, checked before they reach the model server (a bad script is the probe's
    error, not the environment's)."""
    if not isinstance(script, list) or not script:
        raise ValueError(f"a probe's script must be a non-empty list of turns, got {type(script).__name__}")
    for i, turn in enumerate(script):
        call = turn.get("call") if isinstance(turn, dict) else None
        ok = isinstance(turn, dict) and (
            isinstance(turn.get("text"), str) or (isinstance(call, dict) and isinstance(call.get("name"), str))
        )
        if not ok:
            raise ValueError(f'turn {i}: expected {{"text": str}} or {{"call": {{"name": str, "arguments": {{}}}}}}')
    return script


@dataclass
class ProbeSet:
    probes: dict[str, Probe]
    broken: dict[str, str]  # name -> why it could not be loaded


def _instance(obj: Any, where: str) -> Probe:
    probe = obj() if isinstance(obj, type) else obj
    if not isinstance(probe, Probe):
        raise TypeError(f"{where}: expected a Probe subclass or instance, got {type(probe).__name__}")
    if probe.kind not in KINDS:
        raise TypeError(f"{where}: kind {probe.kind!r} is not one of {', '.join(KINDS)}")
    return probe


def load_probes() -> ProbeSet:
    """The shipped probes and every plugin's. A plugin that fails to load is kept in `broken`
    with its error; the rest load as usual."""
    from rollgate.evaluation.audit.builtin import SHIPPED

    probes: dict[str, Probe] = {p.name: p for p in (cls() for cls in SHIPPED)}
    broken: dict[str, str] = {}
    for ep in entry_points(group=GROUP):
        if ep.value.startswith("rollgate.evaluation.audit."):
            continue  # a shipped probe, already listed (also when the installed metadata is older)
        if ep.name in probes:
            broken[ep.name] = f"{ep.value}: the name {ep.name!r} is taken by a shipped probe"
            continue
        try:
            probes[ep.name] = _instance(ep.load(), f"{ep.name} = {ep.value}")
        except Exception as exc:  # noqa: BLE001 - one bad plugin must not hide the others
            broken[ep.name] = f"{type(exc).__name__}: {exc}"
            log.warning("audit probe plugin %s = %s failed to load: %s", ep.name, ep.value, exc)
    return ProbeSet(probes, broken)
