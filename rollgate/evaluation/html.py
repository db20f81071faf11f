"""report.html: the per-environment table and a pass@k plot in one self-contained file. No
script, no font or stylesheet from a CDN: the plot is inline SVG, so the page works offline
and from a file:// URL. Every value from the report is HTML-escaped."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.meta { color: #555; margin-bottom: 12px; }
table { border-collapse: collapse; margin-bottom: 12px; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; } tr.overall td { font-weight: 600; border-top: 2px solid #999; }
.ci { color: #777; font-size: 12px; } .bad { color: #b00020; font-weight: 600; }
svg text { font: 12px system-ui, sans-serif; fill: #333; }
"""


def _cell(metric: dict[str, Any] | None) -> str:
    if not metric:
        return '<td class="na">n/a</td>'
    lo, hi = metric["ci"]
    return f'<td>{metric["value"]:.3f} <span class="ci">[{lo:.3f}, {hi:.3f}]</span></td>'


def _metric_names(report: dict[str, Any]) -> list[str]:
    ks = report["config"]["pass_k"]
    names = ["mean_reward", *(f"pass@{k}" for k in ks)]
    if any(b.get("majority_available") for b in report["envs"].values()):
        names += [f"majority@{k}" for k in ks if k > 1]  # majority of one sample is pass@1 by another name
    return names


def env_table(report: dict[str, Any]) -> str:
    names = _metric_names(report)
    k = report["config"]["k"]
    head = "".join(f"<th>{escape(h)}</th>" for h in ["env", "tasks", "samples", "failed", f"tasks <{k} valid", *names])
    rows = []
    for env, block in [*report["envs"].items(), ("overall", report["overall"])]:
        cls = ' class="overall"' if env == "overall" else ""
        failed = block["failed_samples"]
        detail = ", ".join(f"{escape(o)} {n}" for o, n in block["failures"].items())
        failed_cell = f'<td title="{detail}">{failed}</td>' if failed else "<td>0</td>"
        cells = "".join(_cell(block.get(n)) for n in names)
        rows.append(
            f'<tr{cls} data-env="{escape(env)}"><td>{escape(env)}</td><td>{block["tasks"]}</td>'
            f"<td>{block['samples']}</td>{failed_cell}<td>{block['tasks_short_of_k']}</td>{cells}</tr>"
        )
    return f'<table id="envs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def tag_tables(report: dict[str, Any]) -> str:
    parts = []
    k = report["config"]["k"]
    for env, block in report["envs"].items():
        for tag, values in block.get("by_tag", {}).items():
            names = ["mean_reward", "pass@1", *([f"pass@{k}"] if k > 1 else [])]
            head = "".join(f"<th>{escape(h)}</th>" for h in [tag, "tasks", *names])
            body = "".join(
                f"<tr><td>{escape(value)}</td><td>{m['tasks']}</td>{''.join(_cell(m.get(n)) for n in names)}</tr>"
                for value, m in values.items()
            )
            parts.append(
                f'<h3>{escape(env)} by {escape(tag)}</h3><table class="tags"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>"
            )
    return "".join(parts) or "<p>No task carries tags.</p>"


def pass_at_k_svg(report: dict[str, Any], width: int = 640, height: int = 340) -> str:
    """pass@k against k (log2 axis), one line per environment plus overall, with 95% intervals."""
    ks = report["config"]["pass_k"]
    left, right, top, bottom = 56, 150, 16, 40
    pw, ph = width - left - right, height - top - bottom
    span = math.log2(max(ks)) if max(ks) > 1 else 1.0

    def x(k: int) -> float:
        return left + (math.log2(k) / span if max(ks) > 1 else 0.5) * pw

    def y(v: float) -> float:
        return top + (1.0 - v) * ph

    out = [
        f'<svg id="passk-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="pass@k by environment">',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for i in range(6):
        v = i / 5
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for k in ks:
        out.append(f'<text x="{x(k):.1f}" y="{top + ph + 18}" text-anchor="middle">{k}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" text-anchor="middle">k (samples drawn)</text>')
    out.append(
        f'<text x="14" y="{top + ph / 2:.1f}" transform="rotate(-90 14 {top + ph / 2:.1f})" '
        'text-anchor="middle">pass@k</text>'
    )
    series = [*report["envs"].items(), ("overall", report["overall"])]
    for n, (name, block) in enumerate(series):
        color = "#111" if name == "overall" else PALETTE[n % len(PALETTE)]
        dash = ' stroke-dasharray="5 3"' if name == "overall" else ""
        points = [(k, block.get(f"pass@{k}")) for k in ks]
        points = [(k, m) for k, m in points if m]
        if not points:
            continue
        path = " ".join(f"{x(k):.1f},{y(m['value']):.1f}" for k, m in points)
        out.append(
            f'<polyline class="series" data-env="{escape(name)}" points="{path}" fill="none" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
        )
        for k, m in points:
            lo, hi = m["ci"]
            out.append(
                f'<line x1="{x(k):.1f}" x2="{x(k):.1f}" y1="{y(lo):.1f}" y2="{y(hi):.1f}" stroke="{color}" '
                'stroke-opacity="0.6"/>'
            )
            out.append(f'<circle cx="{x(k):.1f}" cy="{y(m["value"]):.1f}" r="3" fill="{color}"/>')
        ly = top + 14 + 18 * n
        out.append(
            f'<line x1="{left + pw + 12}" x2="{left + pw + 32}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" '
            f'stroke-width="2"{dash}/><text x="{left + pw + 38}" y="{ly}">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def render_html(report: dict[str, Any]) -> str:
    model = report.get("model") or {}
    cfg = report["config"]
    check = report.get("failure_check") or {}
    failure_note = ""
    if check and not check.get("passed", True):
        failure_note = (
            f'<p class="bad" id="failure-check">Failed samples: {check["failure_fraction"]:.1%}, above the '
            f"allowed {check['max_failure_fraction']:.1%}: this evaluation is not trustworthy.</p>"
        )
    overlap = (report.get("train_overlap") or {}).get("tasks") or []
    overlap_note = (
        f'<p class="bad" id="train-overlap">{len(overlap)} task(s) also appear in the training file.</p>'
        if overlap
        else ""
    )
    title = f"Rollgate evaluation: {model.get('name')}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(str(title))}</title>
<style>{CSS}</style></head>
<body data-state="ready">
<h1>{escape(str(title))}</h1>
<div class="meta" id="meta">policy_version {escape(str(model.get("policy_version")))} &middot;
{cfg["k"]} samples per task &middot; correct: {escape(cfg["correct"])} &middot;
95% bootstrap intervals over tasks ({cfg["bootstrap"]["resamples"]} resamples, seed {cfg["bootstrap"]["seed"]})
&middot; {escape(str(report.get("created_at", "")))}</div>
{failure_note}{overlap_note}
<h2>Per environment</h2>
{env_table(report)}
<p class="meta">Failed samples (env_error, model_error, timeout, cancelled) are excluded, never counted
as wrong. A task enters pass@k only with at least k valid samples.</p>
<h2>pass@k</h2>
{pass_at_k_svg(report)}
<h2>By tag</h2>
{tag_tables(report)}
</body></html>
"""


def write_html(report: dict[str, Any], path: Path) -> None:
    path.write_text(render_html(report), encoding="utf-8")
