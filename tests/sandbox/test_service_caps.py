"""The sandbox service's container keeps only the capabilities compose.yaml grants it
(scripts/gen_deploy.py SANDBOX_CAPS): with exactly those, the local provider must still get its
private root and seccomp filter, or the `code` service refuses to start (the docker tier saw that:
bubblewrap could not bring up the loopback of a run's network namespace without NET_ADMIN).

The container is stood in for on the host by root with its capability bounding set cut down to
that list (`setpriv --bounding-set`), so the default tier catches a missing capability in seconds;
the docker tier checks the real container.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.deploy.manifests import ROOT

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="needs root, bubblewrap and setpriv (the sandbox service runs as root in its container)",
)

PROBE = (
    "import json; from rollgate.sandbox.isolation import probe; c = probe(); "
    "print(json.dumps({'private_root': c.private_root, 'seccomp': c.seccomp, 'detail': c.detail}))"
)


def sandbox_caps() -> list[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_deploy
    finally:
        sys.path.pop(0)
    return list(gen_deploy.SANDBOX_CAPS)


def probe_with(caps: list[str]) -> dict:
    bounding = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    argv = ["setpriv", "--bounding-set", bounding, "--inh-caps=-all", "--", sys.executable, "-c", PROBE]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_granted_capabilities_give_a_private_root_and_the_filter():
    caps = probe_with(sandbox_caps())
    assert caps["private_root"] and caps["seccomp"], caps["detail"]


def test_without_net_admin_bubblewrap_cannot_run():
    # why NET_ADMIN is on the list: the check above fails without it
    caps = probe_with([c for c in sandbox_caps() if c != "NET_ADMIN"])
    assert not caps["private_root"] and "loopback" in caps["detail"], caps["detail"]
