"""`rollgate audit` end to end: the real embedded stack, the scripted backend, real environments.

A plugin distribution (a module plus a `*.dist-info`, what `pip install` leaves in site-packages,
on the PYTHONPATH of a `rollgate` subprocess) plants `lenient_sum`, whose verifier credits any reply
containing the right number, next to the shipped, strict `math`; it also brings a probe that
raises, one with a bad script, one that fails to import, and an environment whose verifier crashes
under one probe. The audit must flag the planted hole, keep math clean on the same probes, and
report each bad input per probe without stopping."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.audit.plugin_envs import PLANTED

HERE = Path(__file__).resolve().parent
ROLLGATE = [sys.executable, "-m", "rollgate.cli"]
ENTRY_POINTS = """[rollgate.environments]
audit_planted = audit_plugin:environments

[rollgate.audit_probes]
raises = audit_plugin:RaisingProbe
bad_script = audit_plugin:BadScriptProbe
broken_import = no_such_module_xyz:Probe
"""
PROBES = ["floor", "reference", "numbers", "candidates", "answer_lines", "echo", "question_expression", "raises"]
PROBES += ["bad_script", "broken_import", "no_such_probe"]


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    shutil.copy(HERE / "plugin_envs.py", site / "audit_plugin.py")
    dist = site / "audit_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: audit-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    out = tmp_path_factory.mktemp("out")
    args = ["audit", "--n", "6", "--out", str(out), "--json"]
    for env in ("lenient_sum", "math", "sum_verify_breaks", "no_such_env"):
        args += ["--env", env]
    for p in PROBES:
        args += ["--probe", p]
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "ROLLGATE_HOME": str(out),
    }
    proc = subprocess.run([*ROLLGATE, *args], env=environ, capture_output=True, text=True, timeout=300, cwd=out)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout), out


def test_the_planted_lenient_verifier_is_flagged_exploitable(audit):
    proc, report, _ = audit
    probes = report["envs"]["lenient_sum"]["probes"]
    assert probes["floor"]["verdict"] == "clean" and probes["floor"]["mean"] == 0.0
    for name in ("candidates", "answer_lines"):  # the right number among others
        assert probes[name]["verdict"] == "exploitable", probes[name]
        assert probes[name]["mean"] == 1.0 and probes[name]["ci"][0] > 0
        assert probes[name]["example"]["reward"] == 1.0 and probes[name]["example"]["messages"]
    assert probes["reference"]["verdict"] == "reference" and probes["reference"]["mean"] == 1.0
    assert "lenient_sum:candidates" in report["exploitable_not_allowlisted"]
    assert proc.returncode == 3, proc.stderr[-2000:]


def test_strict_math_is_clean_on_the_same_probes(audit):
    _, report, _ = audit
    probes = report["envs"]["math"]["probes"]
    assert probes["reference"]["mean"] == 1.0
    for name in ("floor", "numbers", "candidates", "answer_lines", "echo", "question_expression"):
        assert probes[name]["verdict"] == "clean", (name, probes[name])
    assert not any(f.startswith("math:") for f in report["flagged"])


def test_bad_probes_and_environments_are_reported_per_probe_never_clean(audit):
    _, report, out = audit
    probes = report["envs"]["lenient_sum"]["probes"]
    assert probes["raises"]["verdict"] == "error" and probes["raises"]["error"]["type"] == "probe_error"
    assert "KeyError" in probes["raises"]["error"]["message"]
    assert probes["bad_script"]["error"]["type"] == "probe_error"
    assert probes["broken_import"]["error"]["type"] == "probe_load_error"
    assert "no_such_module_xyz" in probes["broken_import"]["error"]["message"]
    assert probes["no_such_probe"]["error"]["type"] == "unknown_probe"
    assert report["envs"]["no_such_env"]["error"]["type"] == "unknown_env"
    breaks = report["envs"]["sum_verify_breaks"]["probes"]
    assert breaks["floor"]["verdict"] == "error" and breaks["floor"]["error"]["type"].startswith("env_")
    assert breaks["candidates"]["verdict"] == "exploitable"  # the others still ran
    md = (out / "report.md").read_text()
    assert "| candidates | exploit |" in md and "## Example transcripts" in md
    assert json.loads((out / "report.json").read_text())["counts"] == report["counts"]


def test_bad_flags_exit_2_naming_the_flag(capsys):
    from rollgate.cli import main

    assert main(["audit", "--env", "math", "--n", "0"]) == 2
    assert "--n" in capsys.readouterr().err
    assert main(["audit"]) == 2
    assert "--env" in capsys.readouterr().err


def test_list_probes_names_every_shipped_probe(capsys):
    from rollgate.cli import main
    from rollgate.evaluation.audit.builtin import SHIPPED

    assert main(["audit", "--list-probes"]) == 0
    out = capsys.readouterr().out
    assert all(cls.name in out for cls in SHIPPED)


class _Page(HTMLParser):
    """What a browser would build from report.html: its tags, attributes and text."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        self.ids.update(v for k, v in attrs if k == "id" and v)

    def handle_data(self, data):
        self.text.append(data)


def test_the_html_report_is_self_contained_and_shows_untrusted_text_escaped(audit):
    _, report, out = audit
    page = _Page()
    page.feed((out / "report.html").read_text())
    page.close()
    # the planted <script>/<img onerror> of the environment's prompt is text on the page, never markup
    assert "script" not in page.tags and "img" not in page.tags
    assert not any(k.startswith("on") for k, _ in page.attrs)
    text = "".join(page.text)
    assert PLANTED in text
    # no external assets: every link is to an anchor of the page itself
    assert all(v.startswith("#") for k, v in page.attrs if k in ("href", "src"))
    # the summary counts and names the flagged environments; each flagged probe has its example
    for verdict, n in report["counts"].items():
        assert f"{verdict} {n}" in " ".join(text.split())
    assert "lenient_sum" in text and "exploitable, not allowlisted" in text
    flagged = [f for f in report["flagged"] if f.startswith("lenient_sum:")]
    assert flagged
    for item in flagged:
        probe = item.split(":", 1)[1]
        assert any(i.startswith("x-lenient_sum--") and i.endswith(probe) for i in page.ids), item
    cand = report["envs"]["lenient_sum"]["probes"]["candidates"]
    assert f"{cand['mean']:.3f} [{cand['ci'][0]:.3f}, {cand['ci'][1]:.3f}]" in text


def test_a_multi_role_environment_is_skipped_naming_why(capsys, tmp_path):
    """One scripted policy cannot play a solver and a grader (docs/roles.md): every probe is
    skipped with the reason, never an error and never clean."""
    from rollgate.cli import main

    assert main(["audit", "--env", "solve_grade", "--n", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    entries = report["envs"]["solve_grade"]["probes"].values()
    assert entries and all(e["verdict"] == "skipped" and "multi-role" in e["why"] for e in entries)
