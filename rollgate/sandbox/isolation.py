"""What isolation this host allows, and the pieces the local provider builds from it.

Layers, strongest available first (probed once at start-up by actually trying them):
- `namespaces` (root): a new network, PID and mount namespace per exec, a private /tmp, the
  program run as a dedicated unprivileged uid (`setpriv`), rlimits (`prlimit`);
- `userns` (not root, unprivileged user namespaces allowed): the same namespaces inside a user
  namespace, but the program keeps the service's uid;
- `none`: rlimits and a process group only. Untrusted code can then reach the network, read what
  the service user can read, and signal the service: a loud warning at start-up, and
  `doctor_check()` reports it.
With bubblewrap (`bwrap`) on the host, the namespaced modes also get a private root filesystem
(rootfs.py: the system tree read-only, no home, no checkout, no Rollgate) and, with libseccomp, a
seccomp filter (seccomp.py); without it (`private_root: false`) they fall back to util-linux
`unshare` over the host's own root, which the code environment refuses.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Mode = Literal["namespaces", "userns", "none"]
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# Where the work dir appears inside the namespaces (the host path stays private).
INNER_WORKDIR = "/tmp/work"


@dataclass(frozen=True)
class Capabilities:
    mode: Mode
    root: bool
    network_isolated: bool
    pid_namespace: bool
    private_tmp: bool
    dedicated_uid: bool
    rlimits: bool
    detail: str
    private_root: bool = False  # bubblewrap builds a root of the system tree only (rootfs.py)
    seccomp: bool = False  # the seccomp filter of seccomp.py is loaded into every run

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tool(name: str) -> str | None:
    return shutil.which(name, path=SYSTEM_PATH)


def _try(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, env={"PATH": SYSTEM_PATH}, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return done.returncode == 0, done.stderr.decode(errors="replace").strip()[:300]


_NS_FLAGS = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
_PROBE = "mount -t tmpfs -o size=1m tmpfs /tmp && test ! -e /proc/2 || exit 3"


def _probe_bwrap(userns: bool) -> tuple[bool, bool, str]:
    """(private root works, seccomp works, why not): a real bubblewrap run with the same root and
    filter every exec gets."""
    from rollgate.sandbox import rootfs, seccomp

    if _tool("bwrap") is None:
        return False, False, "bubblewrap (bwrap) is not installed"
    spec = rootfs.build_root(sys.executable)
    program, why_not = seccomp.bpf_program()
    with tempfile.TemporaryDirectory() as work:
        for filt in ([program] if program else []) + [None]:
            fd = seccomp.bpf_fd(filt) if filt else None
            try:
                opts = rootfs.bwrap_argv(
                    spec, workdir=work, tmpfs_bytes=2**20, seccomp_fd=fd, userns=userns, keep_setuid=False
                )
                argv = [_tool("bwrap"), *opts[1:], "--", "sh", "-c", "test ! -e /home && test ! -e /var"]
                done = subprocess.run(
                    argv,
                    capture_output=True,
                    timeout=10,
                    env={"PATH": SYSTEM_PATH},
                    cwd="/",
                    pass_fds=(fd,) if fd else (),
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return False, False, f"bwrap failed: {exc}"
            finally:
                if fd is not None:
                    os.close(fd)
            if done.returncode == 0:
                return True, filt is not None, why_not if filt is None else ""
            why_not = done.stderr.decode(errors="replace").strip()[:300]
    return False, False, f"bwrap failed: {why_not}"


@functools.cache
def probe() -> Capabilities:
    """Try each isolation layer for real (cached: a property of the host for the process lifetime)."""
    caps = _probe_namespaces()
    if not caps.network_isolated:
        return caps
    root_ok, filt_ok, why = _probe_bwrap(userns=caps.mode == "userns")
    if not root_ok:
        return replace(caps, detail=f"{caps.detail}; NO private root ({why})")
    detail = f"{caps.detail}; private root (bubblewrap); " + ("seccomp filter" if filt_ok else f"NO seccomp ({why})")
    return replace(caps, private_root=True, seccomp=filt_ok, detail=detail)


def _probe_namespaces() -> Capabilities:
    root = os.geteuid() == 0
    unshare, setpriv, prlimit, sh = _tool("unshare"), _tool("setpriv"), _tool("prlimit"), _tool("sh")
    missing = [
        n for n, p in (("unshare", unshare), ("setpriv", setpriv), ("prlimit", prlimit), ("sh", sh)) if p is None
    ]
    rl = prlimit is not None
    if not missing:
        if root:
            ok, why = _try([unshare, *_NS_FLAGS, "--", sh, "-c", _PROBE])  # type: ignore[list-item]
            if ok:
                return Capabilities(
                    "namespaces",
                    root,
                    True,
                    True,
                    True,
                    True,
                    rl,
                    "network, PID and mount namespaces; dedicated uid per sandbox",
                )
            detail = f"unshare failed as root: {why}"
        else:
            argv = [unshare, "--user", "--map-root-user", *_NS_FLAGS, "--", sh, "-c", _PROBE]
            ok, why = _try(argv)  # type: ignore[arg-type]
            if ok:
                return Capabilities(
                    "userns",
                    root,
                    True,
                    True,
                    True,
                    False,
                    rl,
                    "namespaces inside a user namespace; code runs as the service uid",
                )
            detail = f"unprivileged user namespaces unavailable: {why}"
    else:
        detail = f"missing tools: {', '.join(missing)} (util-linux)"
    return Capabilities("none", root, False, False, False, False, rl, detail)


def doctor_check() -> dict[str, Any]:
    """For `rollgate doctor`: {ok, name, detail, capabilities}. ok is False when untrusted code
    would run without network isolation."""
    caps = probe()
    ok = caps.network_isolated and caps.private_root
    if ok:
        detail = f"sandbox isolation: {caps.mode} ({caps.detail})"
    elif caps.network_isolated:
        detail = (
            f"sandbox has namespaces but NO private root filesystem ({caps.detail}); untrusted code can read "
            "every world-readable file of the host, Rollgate's source and task data included. Install "
            "bubblewrap (apt-get install bubblewrap)."
        )
    else:
        detail = (
            f"sandbox has NO network/PID isolation on this host ({caps.detail}); untrusted code can reach "
            "the network and the service's files. Run as root, allow user namespaces, or use the docker / "
            "kubernetes provider."
        )
    return {"ok": ok, "name": "sandbox", "detail": detail, "capabilities": caps.as_dict()}


def warn_if_weak(caps: Capabilities) -> None:
    if caps.network_isolated and not caps.private_root:
        log.warning("SANDBOX HAS NO PRIVATE ROOT: %s. Untrusted code can read the host's files.", caps.detail)
    elif not caps.network_isolated:
        log.warning(
            "SANDBOX IS NOT ISOLATED: %s. Untrusted code will run with network access and the "
            "service's file permissions. Use a host that allows namespaces or another provider.",
            caps.detail,
        )
    else:
        log.info("sandbox isolation: %s (%s)", caps.mode, caps.detail)


class UidLease:
    """A uid reserved for one sandbox across every process on the host (an flock held while the
    sandbox lives), so the per-uid process limit and file permissions separate sandboxes."""

    def __init__(self, uid: int, fd: int):
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


class UidAllocator:
    def __init__(self, base: int = 900_000, count: int = 65_536, lock_dir: str | None = None):
        if base < 1000 or count < 1:
            raise ValueError("uid_base must be >= 1000 and uid_count >= 1")
        self.base, self.count = base, count
        self.lock_dir = Path(lock_dir or Path(tempfile.gettempdir()) / "rollgate-sandbox-uids")
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def acquire(self) -> UidLease:
        start = random.randrange(self.count)
        for i in range(min(self.count, 4096)):
            uid = self.base + (start + i) % self.count
            fd = os.open(self.lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            # A crashed service may have left processes of this uid behind.
            kill_uid_processes(uid)
            return UidLease(uid, fd)
        raise RuntimeError("no free sandbox uid (every uid of the range is in use)")


def kill_uid_processes(uid: int) -> int:
    """SIGKILL every live process whose real or effective uid is `uid`; returns how many were found.
    Zombies are skipped: they run nothing and only their parent can remove them."""
    found = 0
    for _ in range(3):  # a process may fork while we scan: repeat until a scan finds none
        pids = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError), open(f"/proc/{entry.name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"State:") and b"Z" in line.split()[1:2]:
                        break
                    if line.startswith(b"Uid:"):
                        ids = line.split()[1:3]
                        if str(uid).encode() in ids:
                            pids.append(int(entry.name))
                        break
        if not pids:
            break
        found += len(pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return found


def world_executable(path: str) -> bool:
    """Whether an unprivileged other uid can run `path` (every directory on the way traversable)."""
    p = Path(path).resolve()
    try:
        if not p.stat().st_mode & 0o001:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in p.parents)
    except OSError:
        return False


def scratch_mounts(tmpfs_bytes: int, hide_paths: list[str]) -> list[str]:
    """Shell lines run as root inside the mount namespace: a private /tmp and /dev/shm, hidden paths,
    and the work dir bound at INNER_WORKDIR (the shell's cwd is the host work dir at this point)."""
    size = max(1, tmpfs_bytes // 1024)
    lines = [
        f"mount -t tmpfs -o size={size}k,mode=1777,nosuid,nodev tmpfs /tmp",
        f"mkdir {INNER_WORKDIR}",
        # --no-canonicalize: "." is resolved by the kernel against the cwd held before /tmp was
        # covered, not re-resolved by path (which now points into the new tmpfs).
        f"mount --bind --no-canonicalize . {INNER_WORKDIR}",
        f"cd {INNER_WORKDIR}",
    ]
    if os.path.isdir("/dev/shm"):
        lines.append("mount -t tmpfs -o size=1024k,mode=1777,nosuid,nodev tmpfs /dev/shm")
    if os.path.isdir("/var/tmp"):
        lines.append("mount -t tmpfs -o size=1024k,mode=1777,nosuid,nodev tmpfs /var/tmp")
    for p in hide_paths:
        if os.path.isdir(p):
            lines.append(f"mount -t tmpfs -o ro,size=4k,mode=0 tmpfs {shlex.quote(p)}")
        elif os.path.exists(p):
            lines.append(f"mount --bind /dev/null {shlex.quote(p)}")
    return lines
