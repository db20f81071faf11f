"""The audit's repository probes (builtin_swe.py) against `swe/parse` through the normal rollout
path: the embedded stack, the scripted backend playing each probe's tool calls, the family's real
sandbox and verifier. Every probe must stay at the floor (0) while the gold patch earns 1.0. Tasks
come from the first validated tasks of `parse` (validated once per machine, then cached)."""

from __future__ import annotations

import shutil

from rollgate.evaluation.audit.builtin_swe import SWE_PROBES, targets
from rollgate.evaluation.audit.probes import ProbeContext
from rollgate.evaluation.audit.run import AuditOptions, run_audit, stack_settings
from rollgate.evaluation.sources import StackSource
from tests.conftest import missing

ENV = "swe/parse"


def test_every_repository_probe_scores_zero_on_swe_while_the_gold_patch_scores_one():
    for tool in ("bwrap", "patch"):
        if shutil.which(tool) is None:
            missing(f"the swe family needs {tool} (apt-get install bubblewrap patch)")
    names = ["floor", "reference", *(p.name for p in SWE_PROBES)]
    opts = AuditOptions(envs=[ENV], n=2, seed=0, probes=names, resamples=300)
    report = run_audit(opts, lambda env: StackSource(stack_settings(opts, env), [env], concurrency=4))
    probes = report["envs"][ENV]["probes"]
    assert probes["reference"]["mean"] == 1.0, probes["reference"]
    assert probes["floor"]["mean"] == 0.0
    for p in SWE_PROBES:
        entry = probes[p.name]
        assert entry["verdict"] == "clean" and entry["mean"] == 0.0 and entry["tasks"] == 2, (p.name, entry)
    assert report["counts"]["exploitable"] == report["counts"]["suspicious"] == report["counts"]["error"] == 0


def test_repository_probes_fit_only_tasks_with_a_shell_and_named_failing_tests():
    issue = "Bug report\n- tests/test_x.py::test_a\n  AssertionError\n- tests/test_x.py::TestB::test_c[1]\n"
    row = {"responses_create_params": {"input": [{"role": "user", "content": issue}]}}
    ctx = ProbeContext.of(ENV, row, [{"name": "shell"}, {"name": "run_tests"}], 16)
    assert targets(ctx) == ["tests/test_x.py::test_a", "tests/test_x.py::TestB::test_c[1]"]
    for p in SWE_PROBES:
        script = p().script(ctx)
        assert p().applies(ctx) is None and script[-1]["text"] and script[-2]["call"]["name"] == "run_tests"
        assert all(t["call"]["name"] == "shell" for t in script[:-2])
    assert "no shell tool" in SWE_PROBES[0]().applies(ProbeContext.of(ENV, row, [{"name": "read_file"}], 16))
