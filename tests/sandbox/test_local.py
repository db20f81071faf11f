"""The local provider's contract: runs, files, quotas, metrics, lifecycle, concurrency, warm pool."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from rollgate.core.errors import BadRequest
from rollgate.core.metrics import Metrics
from rollgate.sandbox import doctor_check, make_provider
from rollgate.sandbox.base import SandboxError
from rollgate.sandbox.isolation import probe
from rollgate.sandbox.local import LocalProvider
from rollgate.sandbox.pool import WarmPool
from tests.sandbox.conftest import SMALL, needs_dedicated_uid, needs_isolation


async def test_code_and_argv_runs_report_output_and_exit_status(sandbox):
    r = await sandbox.exec(code="import sys\nprint(sys.stdin.read().upper())\nsys.exit(3)", stdin="hello")
    assert (r.exit_code, r.stdout, r.timed_out, r.killed_by) == (3, "HELLO\n", False, None)
    r = await sandbox.exec(["sh", "-c", "echo out; echo err >&2"])
    assert r.ok and r.stdout == "out\n" and r.stderr == "err\n" and r.duration_s > 0
    r = await sandbox.exec(code="raise ValueError('boom')")
    assert r.exit_code == 1 and "ValueError: boom" in r.stderr and r.summary() == "exit code 1"


async def test_files_persist_between_runs_of_one_sandbox(sandbox):
    await sandbox.write_file("pkg/data.txt", "41")
    r = await sandbox.exec(code="n = int(open('pkg/data.txt').read())\nopen('out.txt', 'w').write(str(n + 1))")
    assert r.ok, r
    assert await sandbox.read_file("out.txt") == b"42"
    assert await sandbox.read_file("/tmp/work/out.txt") == b"42"  # the path the program itself sees


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd", "", "a/../../b", "."])
async def test_paths_outside_the_work_dir_are_refused(sandbox, bad):
    with pytest.raises(BadRequest) as err:
        await sandbox.write_file(bad, "x")
    assert err.value.field == "path"
    with pytest.raises(BadRequest):
        await sandbox.read_file(bad)


async def test_symlinks_planted_by_the_program_are_never_followed(sandbox, tmp_path):
    host_file = tmp_path / "host.txt"
    host_file.write_text("host secret")
    host_file.chmod(0o644)
    r = await sandbox.exec(["sh", "-c", f"ln -s {host_file} link.txt && ln -s {tmp_path} linkdir && echo ok"])
    assert r.stdout == "ok\n", r
    for path in ("link.txt", "linkdir/host.txt"):
        with pytest.raises(BadRequest, match="cannot read"):
            await sandbox.read_file(path)
    with pytest.raises(BadRequest):
        await sandbox.write_file("link.txt", "overwritten")
    with pytest.raises(BadRequest):
        await sandbox.write_file("linkdir/new.txt", "planted")
    assert host_file.read_text() == "host secret" and not (tmp_path / "new.txt").exists()


async def test_work_dir_quota_resets_an_overfull_work_dir(provider, sandbox):
    code = "for i in range(12):\n    open(f'f{i}.bin', 'wb').write(b'x' * 1000000)\nprint('wrote')"
    r = await sandbox.exec(code=code)
    assert r.killed_by == "disk_quota" and "work dir exceeded" in r.stderr
    assert not os.listdir(sandbox.workdir)
    assert (await sandbox.exec(code="print('fine')")).ok


async def test_executions_are_counted_in_metrics():
    metrics = Metrics()
    provider = LocalProvider(SMALL, metrics=metrics)
    sb = await provider.create()
    try:
        await sb.exec(code="print(1)")
        await sb.exec(code="raise SystemExit(2)")
        await sb.exec(code="while True: pass", timeout_s=0.5)
    finally:
        await sb.destroy()

    def value(result):
        return metrics.registry.get_sample_value(
            "rollgate_sandbox_executions_total",  # noqa: E731
            {"result": result},
        )

    assert (value("ok"), value("error"), value("timeout")) == (1.0, 1.0, 1.0)


async def test_destroy_removes_the_work_dir_and_frees_the_sandbox(provider):
    sb = await provider.create()
    await sb.write_file("x.txt", "x")
    assert os.path.isdir(sb.workdir)
    await sb.destroy()
    await sb.destroy()  # idempotent
    assert not os.path.exists(sb.workdir)
    with pytest.raises(SandboxError, match="destroyed"):
        await sb.exec(code="print(1)")


async def test_exec_arguments_are_validated_with_the_field_named(sandbox):
    for kwargs in ({}, {"cmd": ["true"], "code": "pass"}, {"cmd": "echo hi"}, {"cmd": []}):
        with pytest.raises(BadRequest) as err:
            await sandbox.exec(**kwargs)
        assert err.value.field == "cmd"


@needs_dedicated_uid
async def test_each_sandbox_gets_its_own_uid_and_private_dir(provider):
    a, b = await provider.create(), await provider.create()
    try:
        assert a.lease.uid != b.lease.uid
        assert os.stat(a.workdir).st_uid == a.lease.uid and os.stat(a.workdir).st_mode & 0o777 == 0o700
        r = await a.exec(code="import os; print(os.getuid(), os.getcwd(), os.environ['HOME'])")
        assert r.stdout.split() == [str(a.lease.uid), "/tmp/work", "/tmp/work"]
    finally:
        await a.destroy()
        await b.destroy()


async def test_concurrent_runs_do_not_block_the_event_loop(provider):
    sandboxes = await asyncio.gather(*(provider.create() for _ in range(4)))
    ticks = 0
    stop = False

    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0.01)

    tick_task = asyncio.ensure_future(ticker())
    t0 = time.monotonic()
    try:
        results = await asyncio.gather(*(s.exec(code="import time; time.sleep(0.5); print('done')") for s in sandboxes))
    finally:
        stop = True
        await tick_task
        await asyncio.gather(*(s.destroy() for s in sandboxes))
    elapsed = time.monotonic() - t0
    assert all(r.stdout == "done\n" for r in results)
    assert elapsed < 4 * 0.5  # they ran side by side
    assert ticks >= elapsed / 0.01 * 0.3  # the loop kept ticking while they ran


class SlowStartProvider(LocalProvider):
    """The real local provider with a container-like start-up delay, so closing the pool while a
    sandbox is being made is not a race the test may or may not hit."""

    async def create(self):
        sandbox = await super().create()
        await asyncio.sleep(0.3)
        return sandbox


async def test_warm_pool_hands_out_ready_sandboxes_refills_and_leaks_none(tmp_path):
    root = tmp_path / "sandboxes"
    pool = WarmPool(SlowStartProvider(SMALL, root_dir=str(root)), size=2)
    await pool.wait_full(timeout_s=10)
    first = await pool.create()
    assert pool.hits == 1 and pool.misses == 0
    assert (await first.exec(code="print('pooled')")).stdout == "pooled\n"
    await pool.wait_full(timeout_s=10)  # refilled in the background
    second, third = await pool.create(), await pool.create()
    assert pool.hits == 3
    await asyncio.sleep(0.1)  # the filler is now inside a slow create()
    await asyncio.gather(first.destroy(), second.destroy(), third.destroy())
    await pool.close()  # while the filler is busy refilling
    assert os.listdir(root) == []


def test_make_provider_rejects_unknown_names_and_options():
    with pytest.raises(BadRequest) as err:
        make_provider("vm")
    assert err.value.field == "provider"
    with pytest.raises(BadRequest) as err:
        make_provider("local", no_such_option=1)
    assert err.value.field == "options"


def test_doctor_reports_what_this_host_isolates():
    report = doctor_check()
    caps = probe()
    assert report["name"] == "sandbox" and report["ok"] is (caps.network_isolated and caps.private_root)
    assert report["capabilities"]["mode"] == caps.mode and caps.mode in report["detail"] or not report["ok"]


@needs_isolation
def test_namespaced_command_builds_a_scrubbed_environment(provider, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak-me")
    argv, env = provider.command(["python3", "x.py"], None, "/nonexistent", seccomp_fd=7)
    assert set(env) == {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONDONTWRITEBYTECODE"}
    if provider.caps.private_root:
        assert argv[0] == "bwrap" and "--unshare-net" in argv and "--unshare-pid" in argv
        assert argv[argv.index("--seccomp") + 1] == "7"
        inner = argv[argv.index("--") + 1 :]
        assert inner[0] == "prlimit" and "--no-new-privs" in inner and inner[-2:] == ["python3", "x.py"]
    else:
        assert argv[:2] == ["unshare", "--user"] or argv[0] == "unshare"
        assert "--net" in argv and "--pid" in argv
        assert "prlimit" in argv[-1] and "--no-new-privs" in argv[-1]
