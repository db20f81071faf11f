"""Hostile programs in the local sandbox: each attack is contained, comes back as a failed run (an
ExecResult, never an exception), and the provider keeps serving: every case ends with a normal
run in a fresh sandbox, and no process of the attacker's sandbox survives."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid

import pytest

from rollgate.sandbox.isolation import kill_uid_processes
from rollgate.sandbox.local import LocalSandbox
from tests.sandbox import cases
from tests.sandbox.conftest import needs_dedicated_uid, needs_isolation

still_serving = cases.still_serving


def processes_with(tag: str) -> list[int]:
    """Host pids whose command line contains `tag` (any uid, any namespace)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if tag.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                pass
    return found


async def test_infinite_loop_is_killed_at_the_wall_clock(provider, sandbox):
    r = await sandbox.exec(code="while True:\n    pass", timeout_s=1.0)
    assert r.timed_out and r.killed_by == "timeout" and r.exit_code is None
    assert 1.0 <= r.duration_s < 3.0
    assert (await sandbox.exec(code="print('after')")).stdout == "after\n"
    await still_serving(provider)


async def test_fork_bomb_is_bounded_by_the_process_limit(provider, sandbox: LocalSandbox):
    bomb = "import os\nn = 0\nwhile True:\n    try:\n        os.fork(); n += 1\n    except OSError:\n        pass\n"
    r = await sandbox.exec(code=bomb, timeout_s=1.5)
    # the process limit makes fork fail (caught above), so the bomb spins until the wall clock
    assert r.timed_out and r.killed_by == "timeout" and r.exit_code is None, r
    if sandbox.lease is not None:
        assert kill_uid_processes(sandbox.lease.uid) == 0  # nothing of the bomb survived
    assert (await sandbox.exec(code="print('after')")).stdout == "after\n"
    await still_serving(provider)


async def test_memory_bomb_fails_inside_the_sandbox(provider, sandbox):
    r = await sandbox.exec(code="chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 2**20))")
    # the address-space limit turns the allocation into a Python MemoryError, not an OOM kill
    assert r.exit_code == 1 and r.killed_by is None and r.stderr.rstrip().endswith("MemoryError"), r
    await still_serving(provider)


async def test_huge_file_is_cut_at_the_file_size_limit(provider, sandbox):
    code = (
        "import os\ntry:\n    with open('big.bin', 'wb') as f:\n        while True:\n"
        "            f.write(b'x' * 2**20)\nexcept OSError as e:\n    print('refused', e.errno)\n    raise\n"
    )
    r = await sandbox.exec(code=code)
    # Python ignores SIGXFSZ, so the write past RLIMIT_FSIZE fails with EFBIG (27) and the program ends
    assert r.exit_code == 1 and r.stdout == "refused 27\n" and r.killed_by is None, r
    size = len(await sandbox.read_file("big.bin", max_bytes=64 * 2**20))
    assert size <= provider.limits.max_file_bytes
    await still_serving(provider)


@needs_isolation
async def test_no_network_even_to_loopback(provider):
    await cases.no_network_even_to_loopback(provider)


@needs_dedicated_uid
async def test_one_session_cannot_read_another_sessions_files(provider):
    await cases.sessions_cannot_read_each_other(provider)


@needs_isolation
async def test_service_environment_and_private_files_stay_hidden(provider, tmp_path, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("ROLLGATE_TEST_SECRET", secret)
    private = tmp_path / "service-key.txt"
    private.write_text(secret)
    await cases.service_secrets_stay_hidden(provider, secret, [str(private), f"/proc/{os.getpid()}/environ"])


@needs_isolation
async def test_sandbox_cannot_kill_the_service(provider, sandbox):
    # A process of the host (root, like the service) whose pid the attacker is given.
    victim = subprocess.Popen(["sleep", "60"])
    try:
        pid = victim.pid
        code = (
            f"import os\nfor pid in ({pid}, -1):\n    try:\n        os.kill(pid, 9)\n        print('sent', pid)\n"
            "    except OSError as e:\n        print('refused', pid, type(e).__name__)\n"
        )
        r = await sandbox.exec(code=code)
        r2 = await sandbox.exec(["sh", "-c", f"kill -9 -1; kill -9 {pid}; echo done"])
        await asyncio.sleep(0.2)
        assert victim.poll() is None  # still running
    finally:
        victim.kill()
        victim.wait()
    # the host's pids do not exist in the sandbox's PID namespace, and it holds no other process
    assert r.ok and r.stdout == f"refused {pid} ProcessLookupError\nrefused -1 ProcessLookupError\n", r
    assert r2.ok and r2.stdout == "done\n" and r2.stderr.count("No such process") == 2, r2
    await still_serving(provider)


async def test_double_forked_daemon_does_not_outlive_the_run(provider, sandbox: LocalSandbox):
    tag = f"rgdaemon{uuid.uuid4().hex[:10]}"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execvp('sh', ['sh', '-c', 'while true; do date >> beat.txt; sleep 0.1; done', '{tag}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\nprint('parent exits')\n"
    )
    r = await sandbox.exec(code=code)
    assert "parent exits" in r.stdout, r
    await asyncio.sleep(0.3)
    assert processes_with(tag) == []
    if sandbox.lease is not None:
        assert kill_uid_processes(sandbox.lease.uid) == 0
    beats = len(await sandbox.read_file("beat.txt"))
    await asyncio.sleep(0.5)
    assert len(await sandbox.read_file("beat.txt")) == beats  # nobody writes any more
    await still_serving(provider)


@pytest.mark.parametrize(
    "flood", ["print('x' * 10**6, end='')", "import sys\nwhile True: sys.stdout.write('y' * 65536)"]
)
async def test_output_is_bounded(provider, sandbox, flood):
    r = await sandbox.exec(code=flood)
    assert len(r.stdout.encode()) <= provider.limits.max_output_bytes and r.stdout_truncated
    await still_serving(provider)
