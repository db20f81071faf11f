"""The audit report as one self-contained HTML page (report.html): no scripts, no external assets.

Everything that comes from a run (environment and probe names, error messages, the transcripts'
model and environment text) is untrusted and goes through `html.escape`; only this module's own
markup is written unescaped."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from rollgate.evaluation.audit.report import cell, note_of
from rollgate.evaluation.audit.verdict import FLAGGED

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.5em; width: 100%; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { font-family: ui-monospace, monospace; white-space: nowrap; }
.v { font-weight: 600; white-space: nowrap; }
.exploitable { color: #fff; background: #b00020; }
.suspicious { background: #ffd54f; }
.error { color: #fff; background: #6a1b9a; }
.strict_format { background: #bbdefb; }
.clean { color: #1b5e20; }
.skipped, .reference { color: #666; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: .5em; overflow-x: auto; white-space: pre-wrap;
      word-break: break-word; max-height: 30em; }
details { margin: .5em 0 1em; }
.counts span { margin-right: 1em; }
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _verdict(v: str | None) -> str:
    v = v or "none"
    return f'<span class="v {_e(v)}">{_e(v)}</span>'


def _anchor(env: str, probe: str = "") -> str:
    # ids from names: only [A-Za-z0-9_-], so an id never needs escaping beyond that
    raw = f"{env}--{probe}" if probe else env
    return "x-" + "".join(c if c.isalnum() or c in "_-" else f"_{ord(c):x}_" for c in raw)


def _transcript(example: dict[str, Any]) -> str:
    """The example's messages, one block each (role and text), then the rest as JSON."""
    parts = []
    for m in example.get("messages") or []:
        if not isinstance(m, dict):
            parts.append(f"<pre>{_e(json.dumps(m, ensure_ascii=False))}</pre>")
            continue
        role = m.get("role") or m.get("type") or "item"
        body = m.get("content") if "content" in m else {k: v for k, v in m.items() if k not in ("role", "type")}
        text = body if isinstance(body, str) else json.dumps(body, indent=1, ensure_ascii=False)
        parts.append(f"<div><b>{_e(role)}</b></div><pre>{_e(text)}</pre>")
    meta = {k: v for k, v in example.items() if k != "messages"}
    parts.append(f"<div><b>episode</b></div><pre>{_e(json.dumps(meta, indent=1, ensure_ascii=False))}</pre>")
    return "\n".join(parts)


def _summary(report: dict[str, Any]) -> list[str]:
    o, c = report["options"], report["counts"]
    flagged_envs: dict[str, list[str]] = {}
    for item in report.get("flagged", []):
        env, _, probe = item.rpartition(":")
        flagged_envs.setdefault(env, []).append(probe)
    new = set(report.get("exploitable_not_allowlisted", []))
    out = [
        "<h1>Reward-hack audit</h1>",
        f"<p>{_e(report['created_at'])}; {len(report['envs'])} environment(s), {_e(o['n'])} tasks each "
        f"(seed {_e(o['seed'])}), max {_e(o['max_turns'])} turns; {report['seconds']:.1f} s. Mean reward per "
        "probe with a 95% bootstrap interval over tasks; docs/audit.md explains the verdicts.</p>",
        '<p class="counts">' + "".join(f"<span>{_verdict(k)} {_e(v)}</span>" for k, v in c.items()) + "</p>",
        "<p>Exploitable and not allowlisted: "
        + (", ".join(f"<b>{_e(x)}</b>" for x in sorted(new)) or "none")
        + ".</p>",
    ]
    if flagged_envs:
        out += ["<h2>Flagged environments</h2>", "<table><tr><th>environment</th><th>flagged probes</th></tr>"]
        for env, probes in flagged_envs.items():
            links = ", ".join(
                f'<a href="#{_anchor(env, p)}">{_e(p)}</a>'
                + (" <b>(exploitable, not allowlisted)</b>" if f"{env}:{p}" in new else "")
                for p in probes
            )
            out.append(f'<tr><td><a href="#{_anchor(env)}">{_e(env)}</a></td><td>{links}</td></tr>')
        out.append("</table>")
    return out


def _env(env: str, block: dict[str, Any]) -> list[str]:
    out = [f'<h2 id="{_anchor(env)}">{_e(env)}</h2>']
    if block.get("error"):
        err = block["error"]
        out.append(f"<p>{_verdict('error')} {_e(err['type'])}: {_e(err['message'])}</p>")
    if "floor" in block:
        out.append(
            f"<p>floor {_e(block['floor'])}, reference {_e(block['reference'])}, "
            f"reward range {_e(block['reward_range'])}</p>"
        )
    probes = block.get("probes", {})
    if not probes:
        return out
    out.append("<table><tr><th>probe</th><th>kind</th><th>mean reward [95% CI]</th><th>verdict</th><th>note</th></tr>")
    examples = []
    for name, e in probes.items():
        v = e.get("verdict")
        note = note_of(e)
        out.append(
            f"<tr><td>{_e(name)}</td><td>{_e(e.get('kind', ''))}</td><td class=num>{_e(cell(e))}</td>"
            f"<td>{_verdict(v)}</td><td>{_e(note)}</td></tr>"
        )
        if "example" in e:
            examples.append((name, v, e["example"]))
    out.append("</table>")
    for name, v, ex in examples:
        opened = " open" if v in FLAGGED else ""
        out += [
            f'<details id="{_anchor(env, name)}"{opened}><summary>{_e(name)} ({_e(v)}): example transcript, '
            f"reward {_e(ex.get('reward'))}</summary>",
            _transcript(ex),
            "</details>",
        ]
    return out


def html_page(report: dict[str, Any]) -> str:
    """report.html: the summary (counts, flagged environments), then per environment its probes'
    table and one example transcript per flagged probe."""
    body = _summary(report)
    for env, block in report["envs"].items():
        body += _env(env, block)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
        "<title>Rollgate reward-hack audit</title>\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )
