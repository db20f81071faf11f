"""The local provider: one short-lived, isolated process tree per execution.

Per sandbox: a private work dir (mode 0700, random name) owned by a dedicated uid. Per exec:
`bwrap` (new network, PID, IPC, UTS and mount namespaces; a root of the system tree only, read
only, see rootfs.py; the work dir bound at /tmp/work; the seccomp filter of seccomp.py; the PID
namespace dies with its first process, taking every daemon with it) -> `prlimit` (CPU, address
space, processes, file size, open files, no core) -> `setpriv` (the dedicated uid, no
capabilities, no_new_privs) -> the program, with an environment built from scratch. The wall
clock kills the whole process group and then every process of the uid.
See isolation.py for the weaker modes used where the host does not allow namespaces or has no
bubblewrap (util-linux `unshare` over the host's root).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollgate.core.metrics import Metrics
from rollgate.sandbox.base import ExecResult, SandboxError, SandboxLimits, as_bytes, check_exec_args
from rollgate.sandbox.files import read_beneath, tree_bytes, wipe_contents, write_beneath
from rollgate.sandbox.isolation import (
    INNER_WORKDIR,
    SYSTEM_PATH,
    Capabilities,
    UidAllocator,
    UidLease,
    kill_uid_processes,
    probe,
    scratch_mounts,
    warn_if_weak,
    world_executable,
)
from rollgate.sandbox.process import kill_children_first, killpg, run_bounded, signal_reason
from rollgate.sandbox.rootfs import RootSpec, build_root, bwrap_argv
from rollgate.sandbox.seccomp import bpf_fd, bpf_program

log = logging.getLogger(__name__)

SETUP_FAILED = 125  # exit status of the wrapper shell when the namespace setup itself failed
_SETUP_MARK = "rollgate-sandbox-setup-failed"
CODE_FILE = "_rollgate_exec.py"
# util-linux `unshare --fork` re-raises its child's fatal signal on itself, which fails for SIGKILL:
# it then exits 1 with this line. Seen only when the program died of a SIGKILL we did not send.
_UNSHARE_SIGKILL = "unshare: sigprocmask unblock failed: Invalid argument\n"


def resolve_python(python: str | None, caps: Capabilities) -> str:
    """The interpreter for `code=` runs: explicit, else ours when the sandbox uid can run it, else
    the system python3 (ours may live in a home directory the sandbox uid cannot enter)."""
    if python:
        return python
    if caps.private_root:
        # The base interpreter, never a virtual environment's (its site-packages hold Rollgate).
        real = os.path.realpath(sys.executable)
        if not caps.dedicated_uid or world_executable(real):
            return real
    elif not caps.dedicated_uid or world_executable(sys.executable):
        return sys.executable
    found = shutil.which("python3", path=SYSTEM_PATH)
    if found is None:
        raise SandboxError("no python3 the sandbox user can run; set the sandbox `python` option", field="python")
    return found


class LocalSandbox:
    def __init__(self, provider: LocalProvider, workdir: str, lease: UidLease | None):
        self.id = os.path.basename(workdir)
        self.provider = provider
        self.workdir = workdir
        self.lease = lease
        self._lock = asyncio.Lock()  # one exec at a time: the uid sweep must not kill a sibling run
        self._destroyed = False

    @property
    def owner(self) -> tuple[int, int] | None:
        return (self.lease.uid, self.lease.uid) if self.lease else None

    async def exec(
        self,
        cmd: Sequence[str] | None = None,
        *,
        code: str | None = None,
        stdin: str | bytes = b"",
        timeout_s: float | None = None,
    ) -> ExecResult:
        check_exec_args(cmd, code)
        if self._destroyed:
            raise SandboxError(f"sandbox {self.id} was destroyed", field="sandbox")
        p = self.provider
        limits = p.limits
        timeout = min(timeout_s, limits.timeout_s * 10) if timeout_s else limits.timeout_s
        async with self._lock:
            if code is not None:
                await self.write_file(CODE_FILE, code)
                cmd = [p.python, "-E", "-s", "-B", CODE_FILE]
            filt = bpf_fd(p.seccomp_program) if p.seccomp_program else None
            try:
                argv, env = p.command(list(cmd), self.lease, self.workdir, seccomp_fd=filt)  # type: ignore[arg-type]
                result = await run_bounded(
                    argv,
                    stdin=as_bytes(stdin),
                    timeout_s=timeout,
                    max_output_bytes=limits.max_output_bytes,
                    env=env,
                    cwd=self.workdir,
                    sweep=self._sweep if self.lease else None,
                    unexplained_sigkill=p.sigkill_reason,
                    kill_tree=kill_children_first if p.caps.pid_namespace else killpg,
                    pass_fds=(filt,) if filt is not None else (),
                )
            finally:
                if filt is not None:
                    os.close(filt)
            if p.root is not None:
                result = _signal_from_status(result, p.sigkill_reason)
            if result.exit_code == SETUP_FAILED and _SETUP_MARK in result.stderr:
                raise SandboxError(f"sandbox setup failed: {result.stderr.strip()[-300:]}")
            if p.caps.pid_namespace and result.stderr.endswith(_UNSHARE_SIGKILL):
                result = result.model_copy(
                    update={
                        "exit_code": None,
                        "stderr": result.stderr[: -len(_UNSHARE_SIGKILL)],
                        "killed_by": result.killed_by or p.sigkill_reason,
                    }
                )
            result = await self._enforce_quota(result)
        p.metrics.sandbox_execs.labels(result=result.label).inc()
        return result

    async def _sweep(self) -> None:
        assert self.lease is not None
        await asyncio.to_thread(kill_uid_processes, self.lease.uid)

    async def _enforce_quota(self, result: ExecResult) -> ExecResult:
        quota = self.provider.limits.max_workdir_bytes
        used = await asyncio.to_thread(tree_bytes, self.workdir, quota)
        if used <= quota:
            return result
        # Files are bounded one by one (RLIMIT_FSIZE), not in total: over quota, the work dir is reset.
        await asyncio.to_thread(wipe_contents, self.workdir)
        note = f"\n[sandbox] work dir exceeded {quota} bytes; its files were removed\n"
        return result.model_copy(update={"stderr": result.stderr + note, "killed_by": result.killed_by or "disk_quota"})

    async def write_file(self, path: str, data: str | bytes) -> None:
        await asyncio.to_thread(
            write_beneath,
            self.workdir,
            path,
            as_bytes(data),
            owner=self.owner,
            max_bytes=self.provider.limits.max_file_bytes,
        )

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Several files in one worker-thread hop (a repository checkout: hundreds of files)."""

        def write_all() -> None:
            for path, data in files.items():
                write_beneath(
                    self.workdir, path, as_bytes(data), owner=self.owner, max_bytes=self.provider.limits.max_file_bytes
                )

        await asyncio.to_thread(write_all)

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        cap = max_bytes or self.provider.limits.max_file_bytes
        return await asyncio.to_thread(read_beneath, self.workdir, path, max_bytes=cap)

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        await asyncio.to_thread(self._destroy_sync)

    def _destroy_sync(self) -> None:
        if self.lease:
            kill_uid_processes(self.lease.uid)
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.lease:
            self.lease.release()


def _signal_from_status(result: ExecResult, unexplained_sigkill: str) -> ExecResult:
    """bubblewrap reports a program killed by signal N as exit status 128 + N (like a shell)."""
    code = result.exit_code
    if result.killed_by or code is None or not 128 < code <= 128 + 64:
        return result
    return result.model_copy(update={"exit_code": None, "killed_by": signal_reason(code - 128, unexplained_sigkill)})


class LocalProvider:
    """Sandboxes as local process trees. Options (all keyword): `limits`, `root_dir` (where work dirs
    live), `python` (interpreter for code runs), `uid_base` / `uid_count` (the dedicated uid range),
    `hide_paths` (directories/files made invisible inside the sandbox), `ro_paths` (more host
    directories mounted read-only in a private root, e.g. a package directory the code may import),
    `require_isolation` (refuse to start without network isolation), `metrics`."""

    name = "local"
    sandbox_workdir = INNER_WORKDIR  # the work dir as the sandboxed program sees it (namespaced runs)

    def __init__(
        self,
        limits: SandboxLimits | dict[str, Any] | None = None,
        *,
        root_dir: str | None = None,
        python: str | None = None,
        uid_base: int = 900_000,
        uid_count: int = 65_536,
        hide_paths: Sequence[str] = (),
        ro_paths: Sequence[str] = (),
        require_isolation: bool = False,
        metrics: Metrics | None = None,
    ):
        self.limits = SandboxLimits.model_validate(limits or {})
        self.caps = probe()
        warn_if_weak(self.caps)
        if require_isolation and not (self.caps.network_isolated and self.caps.private_root):
            raise SandboxError(
                f"sandbox isolation required but unavailable: {self.caps.detail}", field="require_isolation"
            )
        self.metrics = metrics if metrics is not None else Metrics.off()
        self.hide_paths = list(hide_paths)
        self.root_dir = str(Path(root_dir or Path(tempfile.gettempdir()) / "rollgate-sandboxes").resolve())
        os.makedirs(self.root_dir, exist_ok=True)
        # Traversable but not listable: a sandbox cannot discover its neighbours' (random) names.
        os.chmod(self.root_dir, 0o711)
        self.python = resolve_python(python, self.caps)
        self.root: RootSpec | None = None
        self.seccomp_program: bytes | None = None
        if self.caps.private_root:
            try:
                self.root = build_root(self.python, list(ro_paths), self.hide_paths)
            except ValueError as exc:
                raise SandboxError(str(exc), field="ro_paths") from None
            if self.caps.seccomp:
                self.seccomp_program = bpf_program()[0]
        self._uids = UidAllocator(uid_base, uid_count) if self.caps.dedicated_uid else None
        # A kill we did not send is the CPU limit's hard SIGKILL (the PID-1 program ignores SIGXCPU).
        self.sigkill_reason = "cpu_limit" if self.caps.pid_namespace else "signal:SIGKILL"

    def capabilities(self) -> dict[str, Any]:
        caps = {"provider": self.name, **self.caps.as_dict(), "python": self.python}
        if self.root is not None:
            caps["read_only"] = list(self.root.binds)
        return caps

    async def create(self) -> LocalSandbox:
        return await asyncio.to_thread(self._create_sync)

    def _create_sync(self) -> LocalSandbox:
        lease = self._uids.acquire() if self._uids else None
        workdir = os.path.join(self.root_dir, f"sbx-{secrets.token_hex(12)}")
        try:
            os.mkdir(workdir, 0o700)
            if lease:
                os.chown(workdir, lease.uid, lease.uid)
        except OSError as exc:
            if lease:
                lease.release()
            raise SandboxError(f"cannot create a sandbox work dir under {self.root_dir}: {exc}") from exc
        return LocalSandbox(self, workdir, lease)

    async def close(self) -> None:
        return None

    def command(
        self, cmd: list[str], lease: UidLease | None, workdir: str, *, seccomp_fd: int | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of one exec (exposed for tests and `rollgate doctor`).
        `seccomp_fd`: an fd holding the seccomp program, inherited by bubblewrap."""
        lim = self.limits
        rlimits = [
            "prlimit",
            f"--cpu={lim.cpu_s}:{lim.cpu_s + 1}",
            f"--as={lim.memory_bytes}",
            f"--nproc={lim.max_procs}",
            f"--fsize={lim.max_file_bytes}",
            f"--nofile={lim.max_open_files}",
            "--core=0",
            "--",
        ]
        mode = self.caps.mode
        # Built from scratch: nothing of the service's environment (keys, tokens) reaches the program.
        env = {
            "PATH": SYSTEM_PATH,
            "HOME": INNER_WORKDIR if mode != "none" else workdir,
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if mode == "none":
            return [*rlimits, *cmd], env
        drop = ["setpriv"]
        if lease is not None:
            drop += [f"--reuid={lease.uid}", f"--regid={lease.uid}", "--clear-groups"]
        if self.root is not None:
            # bubblewrap left only what setpriv needs (root mode); in a user namespace it left none
            # and already set no_new_privs, so there is no bounding set to drop.
            drop += ["--inh-caps=-all", *(["--bounding-set=-all"] if lease else []), "--no-new-privs", "--"]
            opts = bwrap_argv(
                self.root,
                workdir=workdir,
                tmpfs_bytes=lim.tmpfs_bytes,
                seccomp_fd=seccomp_fd,
                userns=mode == "userns",
                keep_setuid=lease is not None,
            )
            return [*opts, "--", *rlimits, *drop, *cmd], env
        drop += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        fail = f"|| {{ echo {_SETUP_MARK} >&2; exit {SETUP_FAILED}; }}"
        setup = [f"{line} {fail}" for line in scratch_mounts(lim.tmpfs_bytes, self.hide_paths)]
        # OLDPWD would name the host work dir: the program only ever sees INNER_WORKDIR.
        script = "; ".join([*setup, "unset OLDPWD", "exec " + shlex.join([*rlimits, *drop, *cmd])])
        ns = ["unshare"] + (["--user", "--map-root-user"] if mode == "userns" else [])
        ns += ["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", "sh", "-c", script]
        return ns, env
