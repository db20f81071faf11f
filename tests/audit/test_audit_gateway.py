"""`rollgate audit --gateway URL`: the probes' episodes on a running gateway (real HTTP on
loopback, the gateway's own agent and environments), the same verdicts as the embedded stack; a
gateway whose model does not play the scripts is refused before any verdict."""

from __future__ import annotations

import json

import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings

PROBES = ["floor", "reference", "candidates", "answer_lines", "answer_only", "format_units"]


def gateway(model: dict, **agent):
    from rollgate.stack.embedded import build_app

    settings = Settings(
        model=model, envs=["math", "ledger"], gateway={"ui": False}, **({"agent": agent} if agent else {})
    )
    return serve_in_thread(build_app(settings), timeout_s=120)


@pytest.fixture(scope="module")
def scripted_gateway():
    with gateway({"backend": "scripted", "model_path": ""}) as url:
        yield url


def audit(capsys, *args):
    from rollgate.cli import main

    rc = main(["audit", "--n", "4", "--json", *[a for p in PROBES for a in ("--probe", p)], *args])
    captured = capsys.readouterr()
    return rc, (json.loads(captured.out) if captured.out.strip() else None), captured.err


def test_the_audit_through_a_gateway_gives_the_embedded_stacks_verdicts(capsys, scripted_gateway):
    rc, via_gateway, err = audit(capsys, "--env", "math", "--env", "ledg*", "--gateway", scripted_gateway)
    assert rc == 0, err
    assert via_gateway["options"]["gateway"] == scripted_gateway
    assert sorted(via_gateway["envs"]) == ["ledger", "math"]  # the pattern resolved on the gateway's list
    rc, embedded, err = audit(capsys, "--env", "math", "--env", "ledger")
    assert rc == 0, err
    for env in ("math", "ledger"):
        got = {n: (e["verdict"], e.get("mean")) for n, e in via_gateway["envs"][env]["probes"].items()}
        want = {n: (e["verdict"], e.get("mean")) for n, e in embedded["envs"][env]["probes"].items()}
        assert got == want, env
    assert via_gateway["envs"]["math"]["reference"] == 1.0


def test_an_environment_the_gateway_does_not_serve_is_reported_not_fatal(capsys, scripted_gateway):
    rc, report, err = audit(capsys, "--env", "math", "--env", "wordle", "--gateway", scripted_gateway)
    assert report["envs"]["wordle"]["error"]["type"] == "unknown_env", err
    assert "gateway serves no environment 'wordle'" in report["envs"]["wordle"]["error"]["message"]
    assert report["envs"]["math"]["probes"]["floor"]["verdict"] == "clean"
    assert rc == 4  # an error entry, no new exploit


@pytest.mark.slow  # loads the tiny model into a gateway: about a minute on 2 loaded cores
def test_a_gateway_whose_model_ignores_the_scripts_is_refused(capsys, tiny_model_dir):
    # a real model (the tiny one), kept short: one turn of a few tokens is enough to tell
    with gateway({"backend": "local", "model_path": tiny_model_dir}, max_turns=1, max_output_tokens_per_call=8) as url:
        rc, report, err = audit(capsys, "--env", "math", "--gateway", url)
    assert rc == 2 and report is None
    assert "--gateway" in err and "scripted backend" in err
