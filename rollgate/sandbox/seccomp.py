"""The seccomp filter of every sandboxed run: the kernel interfaces that turn a sandboxed program
into a namespace builder, a debugger or a kernel-module loader fail with EPERM; everything else
is allowed (the filter narrows, the namespaces and the dedicated uid isolate).

Built once with libseccomp (through `pyseccomp`) into a classic-BPF program that bubblewrap loads
(`--seccomp FD`) after the namespaces are set up and before the program runs. The Docker provider
gets the same list as a profile (`docker_profile`)."""

from __future__ import annotations

import errno
import functools
import logging
import os
import platform

log = logging.getLogger(__name__)

# Refused outright. Namespaces and mounts: no user namespace (root with all capabilities inside
# it), no joining another namespace, no mount table changes. Introspection of other processes and
# of the kernel: ptrace, process_vm_*, perf, bpf, the kernel keyring. Loading or replacing a kernel.
DENIED = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "open_by_handle_at",
    "name_to_handle_at",
    "iopl",
    "ioperm",
    "syslog",
)
# clone stays allowed (threads, fork) but not with a namespace flag: CLONE_NEWNS, CLONE_NEWCGROUP,
# CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET (one rule each: a masked
# compare matches when all bits of its mask are set).
CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


@functools.cache
def bpf_program() -> tuple[bytes | None, str]:
    """(the filter as BPF bytes, "") or (None, why it cannot be built here). Cached per process."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError) as exc:  # pyseccomp raises when libseccomp is absent
        return None, f"pyseccomp / libseccomp2 unavailable: {exc}"
    try:
        flt = sc.SyscallFilter(sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        for name in DENIED:
            try:
                flt.add_rule(deny, name)
            except (ValueError, RuntimeError, OSError):
                log.debug("seccomp: syscall %s unknown on this architecture", name)
        for flag in CLONE_NS_FLAGS:
            flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        # clone3 passes its flags in a struct the filter cannot read: refuse it with ENOSYS, so libc
        # falls back to clone (which the rule above inspects).
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        fd = os.memfd_create("rollgate-seccomp", os.MFD_CLOEXEC)
        try:
            with open(fd, "w+b", closefd=False) as f:
                flt.export_bpf(f)
            os.lseek(fd, 0, os.SEEK_SET)
            data = b""
            while chunk := os.read(fd, 65536):
                data += chunk
        finally:
            os.close(fd)
    except (RuntimeError, OSError, ValueError) as exc:
        return None, f"cannot build the seccomp filter: {exc}"
    return data, ""


def bpf_fd(program: bytes) -> int:
    """A fresh fd holding `program` at offset 0 (bubblewrap reads it to the end), not inheritable:
    the caller passes it explicitly to the one child that needs it."""
    fd = os.memfd_create("rollgate-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def docker_profile() -> dict:
    """The same refusals as a Docker seccomp profile (allow by default, EPERM for the list). Docker's
    own default profile is an allowlist that already refuses most of these to a container without
    capabilities (not ptrace): this one is for engines or runtimes without such a default."""
    arch = {"x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"], "aarch64": ["SCMP_ARCH_AARCH64"]}
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": arch.get(platform.machine(), []),
        "syscalls": [
            {"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
            *(
                {
                    "names": ["clone"],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": errno.EPERM,
                    "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
                }
                for flag in CLONE_NS_FLAGS
            ),
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
        ],
    }
