"""A project's pristine source tree and the test runner, in Rollgate's cache (<home>/swe).

`ensure_source` downloads the pinned sdist with `pip download --no-deps --no-binary :all:` (pip's
configuration picks the index, as for `rollgate model get`), checks its sha256, and unpacks it into
a temporary directory renamed into place, so a half-written tree is never taken as done. A cached
sdist is checked again on reuse. Nothing else downloads: `ensure_runner` copies pytest and the
distributions it needs out of this installation into a directory that sandboxes mount read-only
(the sandbox's interpreter sees no virtual environment).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

from rollgate.core import pinned
from rollgate.core.errors import RollgateError
from rollgate.core.pinned import sha256_file
from rollgate.core.schemas import ErrorKind
from rollgate.resources_servers.families.swe.projects import Project

log = logging.getLogger("rollgate.envs.swe")

# pytest and what it imports at run time (the sandbox's interpreter is 3.11+: no tomli, exceptiongroup)
RUNNER_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")


class SourceError(RollgateError):
    """A project's source could not be fetched or checked; the message says which step and what to do."""

    kind = ErrorKind.upstream
    status = 502

    def __init__(self, step: str, message: str, *, field: str | None = None):
        super().__init__(f"step {step}: {message}", component="env:swe", field=field)
        self.step = step


def swe_home(home: str | os.PathLike) -> Path:
    return Path(home) / "swe"


def _verify(path: Path, project: Project, what: str, remedy: str) -> None:
    got = sha256_file(path)
    if got != project.sha256:
        raise SourceError(
            "verify",
            f"checksum mismatch for {what} of {project.requirement}: expected sha256 {project.sha256}, "
            f"got {got}. {remedy}",
            field="sha256",
        )


def _pip_download(project: Project, dest: Path) -> Path:
    try:
        return pinned.pip_download(project.requirement, project.filename, dest, sdist=True, timeout_s=300)
    except pinned.PipDownloadError as exc:
        raise SourceError("download", str(exc)) from None


def fetch_sdist(project: Project, home: str | os.PathLike) -> Path:
    """The verified sdist under <home>/swe/downloads, downloaded now if absent."""
    cached = swe_home(home) / "downloads" / project.filename
    if cached.is_file():
        _verify(cached, project, "the cached sdist", f"Delete {cached} and run the command again.")
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download.", dir=cached.parent) as tmp:
        sdist = _pip_download(project, Path(tmp))
        _verify(sdist, project, "the downloaded sdist", "The index served another file; nothing was kept.")
        os.replace(sdist, cached)
    return cached


def ensure_source(project: Project, home: str | os.PathLike) -> Path:
    """The pristine tree of the project (the sdist unpacked), fetched and unpacked once."""
    root = swe_home(home) / "src" / f"{project.name}-{project.version}"
    stamp = root / ".rollgate-sha256"
    if stamp.is_file() and stamp.read_text().strip() == project.sha256:
        return root / project.top
    sdist = fetch_sdist(project, home)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{project.name}.", dir=root.parent))
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
            outside = [m.name for m in members if not (m.name == project.top or m.name.startswith(project.top + "/"))]
            if outside:
                raise SourceError("extract", f"{project.filename} holds files outside {project.top}/: {outside[:3]}")
            tar.extractall(tmp, members=members, filter="data")
        _world_readable(tmp)
        (tmp / ".rollgate-sha256").write_text(project.sha256 + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root / project.top


def _world_readable(root: Path) -> None:
    """Sandboxed runs use another uid: directories traversable, files readable, nothing writable."""
    for dirpath, _dirs, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


def runner_key() -> str:
    return "-".join(f"{d}{metadata.version(d)}" for d in RUNNER_DISTRIBUTIONS)


def ensure_runner(home: str | os.PathLike) -> Path:
    """A directory holding pytest and its run-time dependencies (copied from this installation),
    for sandboxes to mount read-only and put on PYTHONPATH."""
    key = runner_key()
    root = swe_home(home) / "runner" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if (root / ".rollgate-runner").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".runner.", dir=root.parent))
    try:
        for name in RUNNER_DISTRIBUTIONS:
            try:
                dist = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                raise SourceError("runner", f"{name} is not installed (pip install 'rollgate[swe]')") from None
            for f in dist.files or []:
                src = Path(str(f.locate()))
                if "__pycache__" in f.parts or ".." in f.parts or not src.is_file():
                    continue
                dest = tmp / f
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
        _world_readable(tmp)
        (tmp / ".rollgate-runner").write_text(key + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def cached_source(project: Project, home: str | os.PathLike) -> Path | None:
    """The pristine tree when it is in the cache (seeding never downloads), else None."""
    root = swe_home(home) / "src" / f"{project.name}-{project.version}"
    stamp = root / ".rollgate-sha256"
    if stamp.is_file() and stamp.read_text().strip() == project.sha256:
        return root / project.top
    return None
