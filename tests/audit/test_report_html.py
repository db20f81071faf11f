"""report.html's rendering of what a run cannot vouch for: plugin environment and probe names,
error messages and transcripts are text on the page, never markup (the end-to-end check is in
test_audit_cli.py, on a real run)."""

from __future__ import annotations

from html.parser import HTMLParser

from rollgate.evaluation.audit.report_html import html_page

EVIL = '"><script>alert(1)</script>'


def report() -> dict:
    example = {"task_id": "t", "reward": 1.0, "outcome": "completed", "metrics": {"note": EVIL}}
    example["messages"] = [{"role": "user", "content": EVIL}, {"type": "function_call", "arguments": EVIL}]
    probes = {
        f"p{EVIL}": {"kind": "exploit", "mean": 1.0, "ci": [1.0, 1.0], "tasks": 3, "verdict": "exploitable"},
        "floor": {"kind": "floor", "verdict": "error", "error": {"type": "env_upstream", "message": EVIL}},
    }
    probes[f"p{EVIL}"]["example"] = example
    return {
        "created_at": "2026-01-01T00:00:00+00:00",
        "options": {"n": 3, "seed": 0, "max_turns": 8},
        "seconds": 1.0,
        "counts": {"exploitable": 1, "error": 1},
        "flagged": [f"env{EVIL}:p{EVIL}"],
        "exploitable_not_allowlisted": [f"env{EVIL}:p{EVIL}"],
        "envs": {
            f"env{EVIL}": {"floor": 0.0, "reference": 1.0, "reward_range": [0, 1], "probes": probes},
            "broken": {"error": {"type": "tasks_error", "message": EVIL}, "probes": {}},
        },
    }


def test_untrusted_strings_are_text_and_links_stay_inside_the_page():
    class Page(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.attrs, self.text = [], [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            self.attrs.extend(attrs)

        def handle_data(self, data):
            self.text.append(data)

    page = Page()
    page.feed(html_page(report()))
    assert "script" not in page.tags
    text = "".join(page.text)
    assert text.count("alert(1)") >= 7  # names, flagged list, error messages, transcript parts
    ids = {v for k, v in page.attrs if k == "id"}
    hrefs = [v for k, v in page.attrs if k == "href"]
    assert hrefs and all(h.startswith("#") and h[1:] in ids for h in hrefs)  # every link lands on the page
    assert all(set(i) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") for i in ids)
