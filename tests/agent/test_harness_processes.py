"""Nothing a harness starts outlives it: not a `setsid nohup ... &` child (what mini-swe-agent does
with every command), not a double-forked daemon that ignores SIGTERM; and stopping a harness that
is still running (a cancel, a timeout, a budget) takes under a second.

Real processes, no fakes: the harness is a small Python program written here that daemonizes the
ways real harnesses do, run by HarnessProcess exactly as an episode runs it; pids are checked in
/proc. The same harness inside whole episodes (the job's cancel included) is in test_harness.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rollgate.agent_server.harness.process import HarnessProcess
from tests.agent.harness_checks import process_gone

# Starts a child in a session of its own with nohup, backgrounded (mini-swe-agent's commands), and
# a double-forked daemon that ignores SIGTERM; notes their pids; then exits or waits (mode). With
# `stubborn` the harness itself ignores SIGTERM too.
DAEMONIZES = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time

    note, mode = sys.argv[1], sys.argv[2]
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    nohup_note = note + ".nohup"
    subprocess.run(["sh", "-c", f"setsid nohup sh -c 'echo $$ > {nohup_note}; exec sleep 300' >/dev/null 2>&1 &"],
                   start_new_session=True, check=True)
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(300)
        os._exit(0)
    os.close(w)
    daemon = int(os.read(r, 32))
    while not os.path.exists(nohup_note) or not open(nohup_note).read().strip():
        time.sleep(0.01)
    pids = {"harness": os.getpid(), "daemon": daemon, "nohup": int(open(nohup_note).read())}
    with open(note + ".tmp", "w") as f:
        json.dump(pids, f)
    os.rename(note + ".tmp", note)
    print("ANSWER: started", flush=True)
    if mode != "exit":
        time.sleep(300)
    """
)


@pytest.fixture
def harness(tmp_path) -> Path:
    path = tmp_path / "daemonizes.py"
    path.write_text(DAEMONIZES)
    return path


def process(harness: Path, tmp_path: Path, mode: str) -> HarnessProcess:
    argv = [sys.executable, str(harness), str(tmp_path / "note.json"), mode]
    return HarnessProcess(argv, env=dict(os.environ), cwd=str(tmp_path), keep_bytes=4096, flood_bytes=1 << 20)


async def pids_noted(tmp_path: Path, timeout_s: float = 30.0) -> dict[str, int]:
    note = tmp_path / "note.json"
    deadline = time.monotonic() + timeout_s
    while not note.exists():
        assert time.monotonic() < deadline, "the harness never noted its pids"
        await asyncio.sleep(0.02)
    return json.loads(note.read_text())


def alive(pids: dict[str, int]) -> list[str]:
    return [f"{name} ({pid})" for name, pid in pids.items() if not process_gone(pid)]


def test_a_harness_that_exits_takes_its_daemons_with_it(harness, tmp_path):
    async def main():
        proc = process(harness, tmp_path, "exit")
        await proc.start()
        await proc.wait(30.0)
        assert proc.exited  # the reaper ends only once nothing of the harness is left
        pids = await pids_noted(tmp_path)
        assert alive(pids) == []
        result = await proc.finish()
        assert result.exit_code == 0 and result.signal is None
        assert "ANSWER: started" in result.stdout.last_text()

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["wait", "stubborn"])
def test_stopping_a_running_harness_ends_it_and_its_daemons_within_a_second(harness, tmp_path, mode):
    async def main():
        proc = process(harness, tmp_path, mode)
        await proc.start()
        pids = await pids_noted(tmp_path)
        assert len(alive(pids)) == 3  # all running before the stop
        started = time.monotonic()
        result = await proc.finish()
        took = time.monotonic() - started
        assert alive(pids) == []
        assert took < 1.0, f"stopping took {took:.2f}s"
        # SIGTERM first; one that ignores it gets SIGKILL after the grace
        assert result.signal == ("SIGKILL" if mode == "stubborn" else "SIGTERM"), result.stderr.last_text()

    asyncio.run(main())


def test_an_abandoned_harness_stops_by_itself_within_a_second(harness, tmp_path):
    """The path of an episode task cancelled mid-way (no await left): the reaper, told once, stops all."""

    async def main():
        proc = process(harness, tmp_path, "stubborn")
        await proc.start()
        pids = await pids_noted(tmp_path)
        started = time.monotonic()
        proc.abandon()
        while alive(pids) and time.monotonic() - started < 5:
            await asyncio.sleep(0.01)
        took = time.monotonic() - started
        assert alive(pids) == [] and took < 1.0, f"{alive(pids)} after {took:.2f}s"
        assert await asyncio.wait_for(proc.proc.wait(), 5.0) == -9  # it ignored SIGTERM: SIGKILL, mirrored

    asyncio.run(main())


def test_a_starved_reaper_still_gets_the_harness_killed_within_a_second_and_collects_the_rest(harness, tmp_path):
    """The reaper cannot run (SIGSTOP stands in for a starved machine): the harness's own group is
    SIGKILLed at 0.8 s; what left that group waits for the reaper, which collects it once it runs."""

    async def main():
        proc = process(harness, tmp_path, "stubborn")
        await proc.start()
        pids = await pids_noted(tmp_path)
        assert proc.harness_pid == pids["harness"]
        os.kill(proc.pid, signal.SIGSTOP)
        finishing = asyncio.ensure_future(proc.finish())
        await asyncio.sleep(1.0)
        assert alive(pids) == [f"daemon ({pids['daemon']})", f"nohup ({pids['nohup']})"]  # the harness is gone
        os.kill(proc.pid, signal.SIGCONT)
        await asyncio.wait_for(finishing, 5.0)
        assert alive(pids) == []

    asyncio.run(main())


@pytest.mark.parametrize(("command", "error"), [("no-such-harness-rollgate", FileNotFoundError), ("", PermissionError)])
def test_a_command_that_cannot_run_raises_the_exec_error(tmp_path, command, error):
    if not command:  # a file that is not executable
        command = str(tmp_path / "not-executable")
        Path(command).write_text("#!/bin/sh\n")

    async def main():
        proc = HarnessProcess([command], env=dict(os.environ), cwd=str(tmp_path), keep_bytes=64, flood_bytes=1024)
        with pytest.raises(error):
            await proc.start()
        assert proc.exited

    asyncio.run(main())
