"""Escapes a policy trained with RL would find, tried from inside the local sandbox: each asserts the
specific refusal (the exception, the errno, the tool's message), not just a failed run.

The run's root holds the system tree and the interpreter read-only (rootfs.py); Rollgate, the
checkout, the home directory and the host's other files do not exist there; the seccomp filter
(seccomp.py) turns namespace, mount, ptrace, bpf and keyring calls into EPERM. These need
bubblewrap: they skip without it, except in CI (CI=true), where they fail instead."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

import rollgate
import rollgate.sandbox.local as local_module
from rollgate.resources_servers.envs import code_tasks
from rollgate.sandbox import SandboxError
from rollgate.sandbox.isolation import probe
from rollgate.sandbox.local import LocalProvider
from rollgate.sandbox.seccomp import bpf_fd, bpf_program
from tests.sandbox import cases
from tests.sandbox.conftest import SMALL

pytestmark = pytest.mark.skipif(
    not probe().private_root and os.environ.get("CI") != "true",
    reason=f"no private root for the sandbox on this host (install bubblewrap): {probe().detail}",
)

# The call as the program sees it: ctypes over libc, errno kept.
_LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


async def run(sandbox, code: str) -> dict:
    """Run `code`, which prints one JSON object on its last line; return that object."""
    r = await sandbox.exec(code=code)
    assert r.exit_code == 0, r
    return json.loads(r.stdout.strip().splitlines()[-1])


async def test_rollgate_is_not_importable(sandbox):
    code = (
        "import importlib, json\nout = {}\n"
        "for name in ('rollgate', 'rollgate.resources_servers.envs.code_tasks'):\n"
        "    try:\n        importlib.import_module(name)\n        out[name] = 'imported'\n"
        "    except ModuleNotFoundError as e:\n        out[name] = 'ModuleNotFoundError: ' + e.name\n"
        "print(json.dumps(out))\n"
    )
    out = await run(sandbox, code)
    assert out == {
        "rollgate": "ModuleNotFoundError: rollgate",
        "rollgate.resources_servers.envs.code_tasks": "ModuleNotFoundError: rollgate",
    }


async def test_host_files_do_not_exist_in_the_run(sandbox, tmp_path):
    home_secret = Path.home() / f".rollgate-escape-{uuid.uuid4().hex[:8]}"
    home_secret.write_text("secret of the service's home")
    planted = tmp_path / "task-data.jsonl"
    planted.write_text("hidden tests")
    targets = [
        code_tasks.__file__,  # the hidden tests, expected values and gold solutions
        str(Path(rollgate.__file__).parent.parent / "pyproject.toml"),  # the checkout
        str(home_secret),
        str(planted),
        "/etc/shadow",
        "/etc/passwd",
    ]
    code = (
        "import json\nout = {}\n"
        f"for p in {targets!r}:\n"
        "    try:\n        open(p, 'rb').read()\n        out[p] = 'read'\n"
        "    except OSError as e:\n        out[p] = e.errno\n"
        "print(json.dumps(out))\n"
    )
    try:
        out = await run(sandbox, code)
    finally:
        home_secret.unlink()
    assert out == {t: errno.ENOENT for t in targets}


async def test_the_root_holds_only_the_system_tree_read_only(sandbox):
    code = (
        "import json, os, sys\nout = {'root': sorted(os.listdir('/')), 'cwd': os.getcwd()}\n"
        "for p in ('/usr/evil', '/evil', '/etc/evil'):\n"
        "    try:\n        open(p, 'w')\n        out[p] = 'written'\n"
        "    except OSError as e:\n        out[p] = e.errno\n"
        "open('mine.txt', 'w').write('ok')\nout['workdir'] = open('mine.txt').read()\n"
        "out['venv'] = [e for e in sys.path if os.path.exists(os.path.join(e, 'rollgate'))]\n"
        "print(json.dumps(out))\n"
    )
    out = await run(sandbox, code)
    assert out["cwd"] == "/tmp/work" and out["workdir"] == "ok" and out["venv"] == []
    assert {"home", "work", "var", "opt", "srv", "mnt"}.isdisjoint(out["root"]), out["root"]
    assert out["/usr/evil"] == errno.EROFS  # the system tree is a read-only bind
    # the root and /etc are bubblewrap's own directories: not the sandbox uid's (or read-only)
    assert out["/evil"] in (errno.EACCES, errno.EROFS) and out["/etc/evil"] in (errno.EACCES, errno.EROFS)


async def test_unshare_gives_no_new_user_namespace(sandbox):
    r = await sandbox.exec(["unshare", "-Urn", "id"])
    assert r.exit_code == 1 and "unshare failed: Operation not permitted" in r.stderr, r
    code = _LIBC + (
        "import json\nout = {}\n"
        "for name, flags in (('user', 0x10000000), ('net', 0x40000000), ('mount', 0x20000)):\n"
        "    out[name] = (libc.unshare(flags), ctypes.get_errno())\n"
        "print(json.dumps(out))\n"
    )
    out = await run(sandbox, code)
    assert out == {k: [-1, errno.EPERM] for k in ("user", "net", "mount")}


async def test_clone_with_a_namespace_flag_is_refused_but_fork_and_threads_work(sandbox):
    code = (
        "import json, os, subprocess, threading\nout = {}\n"
        "t = threading.Thread(target=out.setdefault, args=('thread', 'ran'))\nt.start()\nt.join()\n"
        "out['fork'] = subprocess.run(['sh', '-c', 'exit 7']).returncode\n"
        "r = subprocess.run(['unshare', '--user', '--fork', 'true'], capture_output=True, text=True)\n"
        "out['unshare_fork'] = r.stderr.strip()\nprint(json.dumps(out))\n"
    )
    out = await run(sandbox, code)
    assert out["thread"] == "ran" and out["fork"] == 7
    assert "Operation not permitted" in out["unshare_fork"]


async def test_mount_umount_and_pivot_root_are_refused(sandbox):
    code = _LIBC + (
        "import json\nos.mkdir('m')\nout = {}\n"
        "out['mount'] = (libc.mount(b'none', b'm', b'tmpfs', 0, None), ctypes.get_errno())\n"
        "out['umount'] = (libc.umount2(b'/proc', 2), ctypes.get_errno())\n"
        "print(json.dumps(out))\n"
    )
    out = await run(sandbox, code)
    assert out == {"mount": [-1, errno.EPERM], "umount": [-1, errno.EPERM]}
    r = await sandbox.exec(["mount", "-t", "tmpfs", "none", "/tmp"])
    assert r.exit_code != 0 and ("superuser" in r.stderr or "not permitted" in r.stderr), r


async def test_ptrace_is_refused(sandbox):
    # PTRACE_TRACEME needs no privilege at all: only the filter refuses it.
    code = _LIBC + "import json\nprint(json.dumps([libc.ptrace(0, 0, None, None), ctypes.get_errno()]))\n"
    assert await run(sandbox, code) == [-1, errno.EPERM]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="syscall numbers of x86_64")
async def test_kernel_interfaces_are_refused(sandbox):
    numbers = {"bpf": 321, "keyctl": 250, "add_key": 248, "request_key": 249, "perf_event_open": 298}
    numbers |= {"setns": 308, "pivot_root": 155, "init_module": 175, "kexec_load": 246}
    code = _LIBC + (
        "import json\nout = {}\n"
        f"for name, nr in {numbers!r}.items():\n"
        "    out[name] = (libc.syscall(nr, 0, 0, 0, 0, 0), ctypes.get_errno())\n"
        "print(json.dumps(out))\n"
    )
    out = await run(sandbox, code)
    assert out == {name: [-1, errno.EPERM] for name in numbers}


async def test_the_run_has_no_new_privs_no_capabilities_and_the_filter(sandbox):
    code = (
        "import json\nst = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
        "print(json.dumps({k: st[k].strip() for k in ('NoNewPrivs', 'Seccomp', 'CapEff', 'CapBnd')}))\n"
    )
    out = await run(sandbox, code)
    assert out["NoNewPrivs"] == "1" and out["Seccomp"] == "2"
    assert int(out["CapEff"], 16) == 0
    if probe().dedicated_uid:
        assert int(out["CapBnd"], 16) == 0


async def test_host_processes_and_the_network_are_out_of_reach(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = (
        "import json, os, socket\nout = {'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}\n"
        f"for host in ('127.0.0.1', '192.0.2.1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2)\n        out[host] = 'connected'\n"
        "    except OSError as e:\n        out[host] = e.errno\n"
        "print(json.dumps(out))\n"
    )
    try:
        out = await run(sandbox, code)
    finally:
        server.close()
    assert out["pids"] == [1], out  # the program is the namespace's only process
    assert out["127.0.0.1"] == errno.ECONNREFUSED  # its own loopback, where nothing listens
    assert out["192.0.2.1"] == errno.ENETUNREACH


async def test_the_provider_keeps_serving_after_every_attempt(provider):
    await cases.still_serving(provider)


async def test_the_provider_level_cases_hold(provider):
    """The cases the docker tier also runs against the deployed sandbox service."""
    await cases.escapes_are_refused(provider, [str(Path(rollgate.__file__).parent), str(Path.home() / ".bashrc")])


async def test_rollgate_stays_masked_inside_a_mounted_tree():
    """An operator mounts a tree that holds Rollgate's checkout (or site-packages with Rollgate in
    it, as in a container image): Rollgate's directory is masked there, the rest stays readable."""
    checkout = Path(rollgate.__file__).resolve().parent.parent
    provider = LocalProvider(SMALL, ro_paths=[str(checkout.parent)])
    sandbox = await provider.create()
    try:
        code = (
            "import json, os, sys\nout = {}\n"
            f"sys.path.insert(0, {str(checkout)!r})\n"
            "try:\n    import rollgate.resources_servers.envs.code_tasks\n    out['import'] = 'imported'\n"
            "except ModuleNotFoundError as e:\n    out['import'] = e.name\n"
            f"for p in ({code_tasks.__file__!r}, {str(checkout / 'pyproject.toml')!r}):\n"
            "    try:\n        open(p).read()\n        out[p] = 'read'\n"
            "    except OSError as e:\n        out[p] = e.errno\n"
            f"out['neighbours'] = os.path.isdir({str(checkout.parent)!r})\n"
            "print(json.dumps(out))\n"
        )
        out = await run(sandbox, code)
    finally:
        await sandbox.destroy()
    assert out["import"] == "rollgate" and out["neighbours"] is True
    assert out[code_tasks.__file__] == errno.EACCES and out[str(checkout / "pyproject.toml")] == errno.EACCES


def test_a_read_only_path_inside_rollgate_is_refused():
    with pytest.raises(SandboxError) as err:
        LocalProvider(SMALL, ro_paths=[str(Path(code_tasks.__file__).parent)])
    assert err.value.field == "ro_paths" and "Rollgate's own files" in str(err.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="stands in for a non-root service with setpriv, which needs root")
def test_a_non_root_service_gets_the_same_root_and_filter(monkeypatch):
    """The `userns` mode (a service that is not root, with unprivileged user namespaces): the command
    the provider builds, started as uid 65534, gets the private root, the filter and no_new_privs."""
    caps = dataclasses.replace(probe(), mode="userns", root=False, dedicated_uid=False)
    monkeypatch.setattr(local_module, "probe", lambda: caps)
    provider = LocalProvider(SMALL, python="/usr/bin/python3")
    work = tempfile.mkdtemp()  # pytest's tmp_path lies under a 0700 directory of root's
    os.chown(work, 65534, 65534)
    script = (
        "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; unshare -Ur true; "
        "python3 -c 'import rollgate' 2>&1 | tail -1; ls /home; echo ok > f && cat f"
    )
    fd = bpf_fd(bpf_program()[0])
    try:
        argv, env = provider.command(["sh", "-c", script], None, work, seccomp_fd=fd)
        assert "--unshare-user" in argv and "--cap-add" not in argv
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", *argv],
            env=env,
            cwd=work,
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        os.close(fd)
        shutil.rmtree(work, ignore_errors=True)
    assert done.stdout.split("\n")[:4] == [
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "ModuleNotFoundError: No module named 'rollgate'",
        "ok",
    ], done
    assert "unshare failed: Operation not permitted" in done.stderr and "/home" in done.stderr, done
