"""Model-written code never runs unisolated by default (issue 15): the code environment and the
sandbox service refuse to start where the provider cannot isolate, unless
`sandbox.allow_unisolated` is set, and the error says why and how to fix it.

This host can isolate (namespaces as root), so a host that cannot is stood in for by the
capabilities the probe reports there: the exact `Capabilities` the image reported as uid 10001
under Docker's default seccomp profile. The docker tier checks the same refusal in that container.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import rollgate.sandbox.local as local_module
from rollgate.core.settings import Settings
from rollgate.resources_servers.envs.code import CodeEnv
from rollgate.resources_servers.server import build_app
from rollgate.sandbox import SandboxError, check_isolation
from rollgate.sandbox.isolation import Capabilities, probe
from rollgate.sandbox.local import LocalProvider

UNISOLATED = Capabilities(
    "none",
    False,
    False,
    False,
    False,
    False,
    True,
    "unprivileged user namespaces unavailable: unshare: unshare failed: Operation not permitted",
)


@pytest.fixture
def unisolated_host(monkeypatch):
    monkeypatch.setattr(local_module, "probe", lambda: UNISOLATED)


def test_code_env_refuses_to_start_without_isolation(unisolated_host):
    with pytest.raises(SandboxError) as err:
        CodeEnv()
    msg = str(err.value)
    assert err.value.field == "sandbox.allow_unisolated"
    assert "unprivileged user namespaces unavailable" in msg  # why
    assert "sandbox.allow_unisolated: true" in msg and "ROLLGATE_SANDBOX__ALLOW_UNISOLATED" in msg  # how
    assert "sandbox.provider: remote" in msg


def test_code_env_refuses_a_sandbox_that_sees_the_hosts_files(monkeypatch, caplog):
    """Namespaces but no bubblewrap: runs would see the host's root (Rollgate's source, task data)."""
    no_root = Capabilities("namespaces", True, True, True, True, True, True, "namespaces; NO private root (x)")
    monkeypatch.setattr(local_module, "probe", lambda: no_root)
    with pytest.raises(SandboxError) as err:
        CodeEnv()
    assert err.value.field == "sandbox.allow_unisolated"
    assert "no private root" in str(err.value) and "apt-get install bubblewrap" in str(err.value)
    assert "SANDBOX HAS NO PRIVATE ROOT" in caplog.text
    with pytest.raises(SandboxError, match="required but unavailable"):
        LocalProvider(require_isolation=True)
    assert CodeEnv(allow_unisolated=True).sandboxes.capabilities()["private_root"] is False


def test_allow_unisolated_lets_it_start_and_says_so_loudly(unisolated_host, caplog):
    env = CodeEnv(allow_unisolated=True)
    assert env.sandboxes.capabilities()["network_isolated"] is False
    assert "SANDBOX IS NOT ISOLATED" in caplog.text


def test_the_resources_role_refuses_through_settings_and_accepts_the_setting(unisolated_host):
    with pytest.raises(SandboxError, match="allow_unisolated"):
        build_app(Settings(), "code")
    app = build_app(Settings(sandbox={"allow_unisolated": True}), "code")
    assert app.state.runtime.name == "code"


def test_the_refusal_is_a_clean_command_line_error():
    """`rollgate serve` prints the reason and exits non-zero, no traceback (real process: the
    remote provider pointed at nothing refuses before any request, for want of a token)."""
    argv = [sys.executable, "-m", "rollgate.cli", "serve", "--role", "resources", "--env", "code", "--port", "1"]
    env = {
        "ROLLGATE_SANDBOX__PROVIDER": "remote",
        "ROLLGATE_SANDBOX__URL": "http://127.0.0.1:9",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0
    assert "sandbox.token" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_isolating_providers_pass_the_check():
    if probe().network_isolated:
        check_isolation(LocalProvider())  # this host isolates: nothing to refuse
    from rollgate.sandbox.docker import DockerProvider

    check_isolation(DockerProvider())
