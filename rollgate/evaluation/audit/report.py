"""The audit report as markdown (report.md) and as the table printed at the end of a run."""

from __future__ import annotations

import json
from typing import Any

from rollgate.evaluation.audit.verdict import FLAGGED


def cell(entry: dict[str, Any]) -> str:
    if "mean" not in entry:
        return "n/a"
    lo, hi = entry["ci"]
    return f"{entry['mean']:.3f} [{lo:.3f}, {hi:.3f}]"


def note_of(entry: dict[str, Any]) -> str:
    if entry.get("error"):
        return f"{entry['error']['type']}: {entry['error']['message']}"
    note = entry.get("why", "")
    if entry.get("allowlisted"):
        note = f"{note} (allowlisted: {entry['allowlisted']})".strip()
    return note


def summary(report: dict[str, Any]) -> str:
    """One line per flagged or failed probe, then the counts."""
    lines = []
    for env, block in report["envs"].items():
        if block.get("error"):  # the environment as a whole: one line, not one per probe
            lines.append(f"{env:40s} error       {block['error']['type']}: {block['error']['message'][:200]}")
            continue
        for name, e in block.get("probes", {}).items():
            v = e.get("verdict")
            if v in (*FLAGGED, "error", "strict_format"):
                mark = " (allowlisted)" if e.get("allowlisted") else ""
                lines.append(f"{env:40s} {v:11s} {name:18s} {cell(e)}{mark}  {note_of(e)[:160]}")
    c = report["counts"]
    total = ", ".join(f"{k} {v}" for k, v in c.items())
    lines.append(f"probes: {total}; {report['seconds']:.1f} s")
    new = report["exploitable_not_allowlisted"]
    lines.append(f"exploitable, not allowlisted: {', '.join(new) if new else 'none'}")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    o = report["options"]
    c = report["counts"]
    out = [
        "# Reward-hack audit",
        "",
        f"{report['created_at']}; {len(report['envs'])} environment(s), {o['n']} tasks each (seed {o['seed']}), "
        f"max {o['max_turns']} turns; {report['seconds']:.1f} s.",
        "",
        "Counts: " + ", ".join(f"**{k}** {v}" for k, v in c.items()) + ".",
        "",
        "Exploitable and not allowlisted: " + (", ".join(report["exploitable_not_allowlisted"]) or "none") + ".",
        "",
        "Mean reward per probe with a 95% bootstrap interval over tasks. See docs/audit.md for the verdicts.",
    ]
    examples = []
    for env, block in report["envs"].items():
        out += ["", f"## {env}", ""]
        if block.get("error"):
            out += [f"**error** ({block['error']['type']}): {block['error']['message']}", ""]
        if "floor" in block:
            out += [f"floor {block['floor']}, reference {block['reference']}, reward range {block['reward_range']}", ""]
        if block.get("probes"):
            out += ["| probe | kind | mean reward [95% CI] | verdict | note |", "|---|---|---|---|---|"]
        for name, e in block.get("probes", {}).items():
            note = note_of(e).replace("|", "\\|").replace("\n", " ")
            out.append(f"| {name} | {e.get('kind', '')} | {cell(e)} | {e.get('verdict')} | {note} |")
            if "example" in e:
                examples.append((env, name, e["example"]))
    if examples:
        out += ["", "## Example transcripts", ""]
        for env, name, ex in examples:
            out += [
                f"### {env} / {name}: reward {ex['reward']}",
                "",
                "```json",
                json.dumps(ex, indent=1, ensure_ascii=False),
                "```",
                "",
            ]
    return "\n".join(out) + "\n"
