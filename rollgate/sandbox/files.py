"""Host-side file access inside a sandbox work dir that untrusted code controls.

The service may run as root while the sandbox can plant symlinks (`ln -s /etc/shadow out.txt`),
so every path is walked component by component with O_NOFOLLOW relative to the work dir's fd:
nothing outside the work dir is ever opened, whatever the sandbox did to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import PurePosixPath

from rollgate.core.errors import BadRequest, NotFound
from rollgate.sandbox.isolation import INNER_WORKDIR

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def relative_parts(path: str) -> list[str]:
    if not isinstance(path, str) or not path or "\0" in path:
        raise BadRequest("path must be a non-empty string without NUL bytes", component="sandbox", field="path")
    p = PurePosixPath(path)
    if p.is_absolute() and p.is_relative_to(INNER_WORKDIR):
        p = p.relative_to(INNER_WORKDIR)  # the path the sandboxed program sees for its work dir
    if p.is_absolute() or ".." in p.parts:
        raise BadRequest(
            f"path {path!r} must be relative to the work dir and must not contain '..'",
            component="sandbox",
            field="path",
        )
    parts = [x for x in p.parts if x != "."]
    if not parts:
        raise BadRequest(f"path {path!r} names the work dir itself, not a file", component="sandbox", field="path")
    return parts


def _open_parent(root: str, parts: list[str], create: bool, owner: tuple[int, int] | None) -> int:
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                    if owner:
                        os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_beneath(root: str, path: str, data: bytes, *, owner: tuple[int, int] | None, max_bytes: int) -> None:
    parts = relative_parts(path)
    if len(data) > max_bytes:
        raise BadRequest(
            f"file {path!r} is {len(data)} bytes; the limit is {max_bytes}", component="sandbox", field="data"
        )
    try:
        dfd = _open_parent(root, parts, create=True, owner=owner)
    except OSError as exc:
        raise BadRequest(f"cannot write {path!r}: {exc.strerror}", component="sandbox", field="path") from None
    try:
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
    except OSError as exc:
        raise BadRequest(f"cannot write {path!r}: {exc.strerror}", component="sandbox", field="path") from None
    finally:
        os.close(dfd)
    try:
        if owner:
            os.fchown(fd, *owner)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def read_beneath(root: str, path: str, *, max_bytes: int) -> bytes:
    parts = relative_parts(path)
    try:
        dfd = _open_parent(root, parts, create=False, owner=None)
        try:
            # O_NONBLOCK: a FIFO planted by the sandbox must not hang the service.
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        finally:
            os.close(dfd)
    except FileNotFoundError:
        raise NotFound(f"no file {path!r} in the sandbox", component="sandbox", field="path") from None
    except OSError as exc:
        raise BadRequest(f"cannot read {path!r}: {exc.strerror}", component="sandbox", field="path") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadRequest(f"{path!r} is not a regular file", component="sandbox", field="path")
        chunks, left = [], max_bytes
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def tree_bytes(root: str, stop_after: int) -> int:
    """Bytes used under `root` (no symlinks followed); stops counting once past `stop_after`."""
    total = 0
    stack = [root]
    while stack and total <= stop_after:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    st = e.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(e.path)
    return total


def wipe_contents(root: str) -> None:
    with os.scandir(root) as it:
        for e in it:
            with contextlib.suppress(OSError):
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
