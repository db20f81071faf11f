"""The root filesystem a sandboxed run sees, built by bubblewrap in a new mount namespace.

Read-only: the system tree (/usr and the merged-/usr links, a few files of /etc) and the
interpreter's own prefix where it lives elsewhere. Private and writable: the work dir (at
/tmp/work), a small /tmp, /dev/shm. Nothing else of the host exists there: no home directory, no
checkout, no task data, no service state. Rollgate itself is never importable: its package
directory, distribution metadata and (editable installs) import hooks are masked wherever they
lie inside a mounted tree, and a virtual environment's site-packages are never mounted.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rollgate.sandbox.isolation import INNER_WORKDIR

# /usr is the system; the rest of / is either a link into it (merged /usr) or left out.
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The files of /etc that dynamic linking, locales and command-line tools read; never passwd/shadow.
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives", "/etc/nsswitch.conf", "/etc/ssl/certs")


@dataclass(frozen=True)
class RootSpec:
    """What the run's root holds: read-only binds, links, and paths masked inside the binds."""

    binds: tuple[str, ...]
    links: tuple[tuple[str, str], ...]  # (target, link path)
    masked_dirs: tuple[str, ...] = field(default=())
    masked_files: tuple[str, ...] = field(default=())

    def argv(self) -> list[str]:
        out: list[str] = []
        made: set[str] = set()
        for path in self.binds:
            # bubblewrap would create a bind's parents with the host's modes (a 0700 home dir): make
            # them traversable, they hold nothing but the way to the bind.
            for parent in reversed(Path(path).parents[:-1]):
                if str(parent) not in made and not _inside(str(parent), ["/usr"]):
                    made.add(str(parent))
                    out += ["--perms", "0755", "--dir", str(parent)]
        for target, link in self.links:
            out += ["--symlink", target, link]
        for path in self.binds:
            out += ["--ro-bind", path, path]
        for path in self.masked_dirs:
            out += ["--perms", "0000", "--tmpfs", path, "--remount-ro", path]
        for path in self.masked_files:
            out += ["--ro-bind", "/dev/null", path]
        return out


def _inside(path: str, trees: list[str]) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in trees)


def rollgate_locations() -> tuple[list[str], list[str]]:
    """(directories, files) through which Rollgate could be imported or read: its package (and,
    for a source checkout, the checkout), its dist-info and its editable-install hooks."""
    import rollgate

    pkg = Path(rollgate.__file__).resolve().parent
    dirs = {str(pkg)}
    if (pkg.parent / "pyproject.toml").exists():  # a source checkout (editable or PYTHONPATH)
        dirs.add(str(pkg.parent))
    files: set[str] = set()
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            low = name.lower()
            if not low.startswith(("rollgate", "__editable__.rollgate", "__editable___rollgate")):
                continue
            full = str(Path(entry, name).resolve())
            (dirs if os.path.isdir(full) else files).add(full)
    return sorted(dirs), sorted(files)


def interpreter_prefix(python: str) -> str | None:
    """The installation prefix of `python` when it is not under /usr (pyenv, /opt, a home dir):
    the directory holding bin/ and lib/ of its real executable."""
    real = os.path.realpath(python)
    if _inside(real, ["/usr"]):
        return None
    if real == os.path.realpath(sys.executable):
        return os.path.realpath(sys.base_prefix)
    return str(Path(real).parent.parent)


@functools.cache
def _system_links() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    binds, links = [], []
    for tree in _SYSTEM_TREES:
        if os.path.islink(tree):
            links.append((os.readlink(tree), tree))
        elif os.path.isdir(tree):
            binds.append(tree)
    for path in _ETC_FILES:
        if os.path.exists(path):
            binds.append(path)
    return tuple(binds), tuple(links)


def build_root(
    python: str, extra_ro: list[str] | tuple[str, ...] = (), hide: list[str] | tuple[str, ...] = ()
) -> RootSpec:
    """The root of every run of one provider (computed once)."""
    binds, links = _system_links()
    trees = list(binds)
    prefix = interpreter_prefix(python)
    if prefix:
        trees.append(prefix)
    for path in extra_ro:
        real = os.path.realpath(path)
        if not os.path.exists(real):
            raise ValueError(f"read-only path {path!r} does not exist")
        trees.append(real)
    dirs, files = rollgate_locations()
    hide_real = [os.path.realpath(p) for p in hide]
    masked_dirs = [d for d in [*dirs, *(h for h in hide_real if os.path.isdir(h))] if _inside(d, trees)]
    masked_files = [f for f in [*files, *(h for h in hide_real if os.path.isfile(h))] if _inside(f, trees)]
    # A mask inside another mask has nothing to cover (and no mount point left).
    masked_dirs = [d for d in masked_dirs if not any(d != o and _inside(d, [o]) for o in masked_dirs)]
    masked_files = [f for f in masked_files if not _inside(f, masked_dirs)]
    for tree in trees[len(binds) :]:
        # A tree that *is* a Rollgate location (or lies inside one) is never mounted at all.
        if any(_inside(tree, [d]) for d in dirs):
            raise ValueError(f"read-only path {tree!r} lies inside Rollgate's own files")
    return RootSpec(
        tuple(dict.fromkeys(trees)), links, tuple(sorted(set(masked_dirs))), tuple(sorted(set(masked_files)))
    )


def bwrap_argv(
    spec: RootSpec,
    *,
    workdir: str,
    tmpfs_bytes: int,
    seccomp_fd: int | None,
    userns: bool,
    keep_setuid: bool,
) -> list[str]:
    """bubblewrap's options for one run (the program's argv follows `--`). `keep_setuid`: root
    mode, where setpriv inside needs CAP_SETUID/SETGID/SETPCAP to become the sandbox uid and drop
    the bounding set; bubblewrap drops every other capability."""
    # --as-pid-1: the program is the namespace's init, as under `unshare --fork`: the limits'
    # catchable signals do not reach it, so the CPU limit ends in a SIGKILL (`cpu_limit`), and a
    # kill(-1) or kill(0) from the program cannot end the run by itself.
    argv = ["bwrap", "--die-with-parent", "--new-session", "--as-pid-1", "--unshare-net", "--unshare-pid"]
    argv += ["--unshare-ipc"]
    argv += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if userns:
        argv += ["--unshare-user", "--disable-userns"]
    argv += spec.argv()
    size = str(max(1024 * 1024, tmpfs_bytes))
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    argv += ["--perms", "1777", "--size", str(1024 * 1024), "--tmpfs", "/dev/shm"]
    argv += ["--bind", workdir, INNER_WORKDIR, "--chdir", INNER_WORKDIR]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if keep_setuid:
        argv += ["--cap-add", "CAP_SETUID,CAP_SETGID,CAP_SETPCAP"]
    return argv
