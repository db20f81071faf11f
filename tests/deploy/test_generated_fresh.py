"""compose.yaml, k8s/base and the compose Prometheus config are generated from
rollgate/core/topology.py by `python scripts/gen_deploy.py`; a hand edit, or a change of the
topology or the environment registry without regenerating, fails here."""

from __future__ import annotations

import subprocess
import sys

from tests.deploy.manifests import ROOT, gen_deploy


def test_deployment_files_are_what_the_generator_writes():
    gen = gen_deploy()
    stale = gen.stale(gen.rendered())
    assert not stale, f"stale deployment files: {stale}; run: python scripts/gen_deploy.py"


def test_the_check_command_fails_on_a_hand_edit(tmp_path, monkeypatch):
    gen = gen_deploy()
    files = gen.rendered()
    edited = {path: text for path, text in files.items()}
    compose = gen.COMPOSE
    edited[compose] = files[compose].replace("restart: unless-stopped", "restart: always", 1)
    # the rendering of an edited file no longer matches what is on disk
    monkeypatch.setattr(gen, "rendered", lambda: edited)
    assert gen.main(["--check"]) == 1
    monkeypatch.undo()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_deploy.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
