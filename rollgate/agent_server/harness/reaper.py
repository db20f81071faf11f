"""The supervisor between Rollgate and one harness process: nothing the harness starts outlives it.

Run as a script, not imported (`python -I -S reaper.py STATUS_FD GRACE_S -- ARGV...`): it needs
only the standard library and starts in a few tens of milliseconds. It marks itself a child
subreaper (PR_SET_CHILD_SUBREAPER), so every process the harness starts stays its descendant or,
orphaned, becomes its child, also after `setsid`, `nohup ... &` or a double fork. Killing "the
harness" is then a walk over /proc for this process's descendants, repeated until it has no
child left: no privilege, cgroup or namespace needed, so it works in containers too.

- After the exec the harness runs as this process's child, leading a process group of its own
  (Rollgate SIGKILLs that group should this process be slow to stop it); STATUS_FD gets
  `0 <harness pid>` or the errno of a failed exec (ENOENT: not found), then it is closed.
- When the harness exits, whatever it left running is SIGKILLed and reaped; then this process ends
  the way the harness ended (its exit code, or the same signal).
- On SIGTERM, SIGINT or SIGHUP (a cancel, or Rollgate's process dying: PR_SET_PDEATHSIG), every
  descendant gets SIGTERM, then SIGKILL after GRACE_S.

What it does not stop: a descendant that SIGKILLs this process first escapes (harnesses are
trusted programs; the model's code belongs in the sandbox, docs/agents.md)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_GIVE_UP_S = 10.0  # only a process stuck in the kernel (D state) outlives SIGKILL that long


class _Stop(Exception):
    pass


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def descendants(root: int) -> list[int]:
    """Live descendants of `root` (zombies excluded: they hold nothing, their reaper collects them)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(b")") + 2 :].split()  # the command name may hold spaces and parens
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


class Reaper:
    def __init__(self) -> None:
        self.main = 0
        self.status: int | None = None  # the harness's wait status once reaped

    def _reap(self, flags: int) -> bool:
        """Reap what has ended (with flags 0: wait for one child to end); False when there is no
        child left at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, flags)
            except ChildProcessError:
                return False
            if pid == self.main:
                self.status = status
            if pid == 0 or not flags & os.WNOHANG:
                return True

    def _signal_all(self, sig: int) -> None:
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill_all(self) -> None:
        """SIGKILL every descendant until this process has no child: an orphan of a killed
        process becomes our child, so "no child" means nothing of the harness is left."""
        deadline = time.monotonic() + _GIVE_UP_S
        while True:
            self._signal_all(signal.SIGKILL)
            if not self._reap(os.WNOHANG) or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def terminate(self, grace_s: float) -> None:
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not self._reap(os.WNOHANG):
                return
            time.sleep(0.01)
        self.kill_all()

    def start(self, argv: list[str], status_fd: int) -> None:
        r, w = os.pipe()  # close-on-exec: EOF on a successful exec, the errno otherwise
        self.main = os.fork()
        if self.main == 0:
            try:
                os.close(r)
                os.close(status_fd)
                for sig in (*_STOP_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ):
                    signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE; exec would keep that
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                os.setpgid(0, 0)
                os.execvp(argv[0], argv)
            except OSError as exc:
                os.write(w, str(exc.errno or errno.ENOEXEC).encode())
            finally:
                os._exit(127)
        os.close(w)
        failed = b""
        while chunk := os.read(r, 64):
            failed += chunk
        os.close(r)
        os.write(status_fd, failed or f"0 {self.main}".encode())
        os.close(status_fd)
        if failed:
            self._reap(0)
            os._exit(127)

    def supervise(self, grace_s: float) -> None:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            while self.status is None:
                self._reap(0)
            self.kill_all()  # the harness is done: what it left running goes with it
        except _Stop:
            for sig in _STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            self.terminate(grace_s)

    def exit(self) -> None:
        status = self.status if self.status is not None else signal.SIGTERM  # cancelled before it ended
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # the two that cannot be handled or blocked
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)


def main(args: list[str]) -> None:
    status_fd, grace_s, parent = int(args[0]), float(args[1]), int(args[2])
    argv = args[args.index("--") + 1 :]
    # Blocked until the fork is done: the child must not run our handler, the parent must not die
    # between the fork and supervising its child.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _stop)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # Rollgate died before PDEATHSIG was armed
        os._exit(128 + signal.SIGTERM)
    reaper = Reaper()
    reaper.start(argv, status_fd)
    reaper.supervise(grace_s)
    reaper.exit()


if __name__ == "__main__":
    main(sys.argv[1:])
