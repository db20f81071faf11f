"""The CI gate of issue 32: a fast audit (3 tasks per environment) of every shipped environment and
a sample of each family fails on an `exploitable` verdict that the reviewed allowlist
(rollgate/evaluation/audit/allowlist.json) does not name, and on any probe that errors.

Real parts: the embedded stack, the scripted backend, the environments' own verifiers and sandbox.
About 40-70 s on 2 cores; a new environment or family joins by being listed here."""

from __future__ import annotations

import logging

from rollgate.evaluation.audit.report import summary
from rollgate.evaluation.audit.run import AuditOptions, run_audit, stack_settings
from rollgate.evaluation.audit.verdict import load_allowlist
from rollgate.evaluation.sources import StackSource

SHIPPED = ["math", "workplace", "game2048", "wordle", "code", "ledger"]
FAMILY_SAMPLE = [
    "reasoning_gym/spell_backward",
    "reasoning_gym/basic_arithmetic",
    "reasoning_gym/caesar_cipher",
    "textarena/GuessTheNumber",
    "textarena/RushHour",
]
log = logging.getLogger(__name__)


def test_no_new_exploitable_verdict_in_shipped_environments_and_family_samples():
    opts = AuditOptions(
        envs=SHIPPED + FAMILY_SAMPLE, n=3, seed=0, max_turns=8, resamples=500, allowlist=load_allowlist(None)
    )

    def make_source(env: str) -> StackSource:
        return StackSource(stack_settings(opts, env), [env], concurrency=16)

    report = run_audit(opts, make_source)
    log.info("audit gate:\n%s", summary(report))
    assert sorted(report["envs"]) == sorted(SHIPPED + FAMILY_SAMPLE)
    assert report["exploitable_not_allowlisted"] == [], summary(report)
    errors = [
        f"{env}:{name}: {e['error']}"
        for env, block in report["envs"].items()
        for name, e in block["probes"].items()
        if e["verdict"] == "error"
    ]
    assert not errors, errors
    # the probes did run: every environment has a floor and most probes a verdict
    for env, block in report["envs"].items():
        assert block["probes"]["floor"]["verdict"] in ("clean", "suspicious", "exploitable"), env
    # gold answers the rows do not carry come from the environment (reasoning-gym's reference_answer)
    assert report["envs"]["reasoning_gym/caesar_cipher"]["reference"] == 1.0
    # game2048 paid 0.10-0.20 for a game with zero moves before its fix
    assert report["envs"]["game2048"]["probes"]["floor"]["mean"] == 0.0
