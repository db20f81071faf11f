"""Pinned files from the package index: `pip download` of one exact file (pip's configuration picks
the index: PIP_INDEX_URL, pip.conf, find-links) and its sha256. Used by `rollgate model get` (a
wheel) and the `swe` family (a project's sdist); each wraps the failure in its own error type."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)


class PipDownloadError(Exception):
    """pip could not run, or did not leave the file: the message says why and where the index comes from."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pip_download(requirement: str, filename: str, dest: Path, *, sdist: bool, timeout_s: float | None = None) -> Path:
    """`dest/filename`, downloaded with `pip download --no-deps`: the sdist (`sdist`) or the wheel
    only, never its dependencies."""
    shown = ["--no-deps", "--no-binary", ":all:"] if sdist else ["--no-deps"]
    binary = [] if sdist else ["--only-binary=:all:"]
    cmd = [sys.executable, "-m", "pip", "download", *shown, *binary]
    cmd += ["--disable-pip-version-check", "--progress-bar", "off", requirement, "-d", str(dest)]
    log.info("fetching %s from the package index: %s", requirement, " ".join(cmd[2:]))
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PipDownloadError(f"could not run pip ({exc})") from None
    got = dest / filename
    if done.returncode != 0 or not got.is_file():
        # pip writes its errors to stderr, progress to stdout
        lines = [ln.strip() for ln in (done.stderr.splitlines() or done.stdout.splitlines()) if ln.strip()]
        last = lines[-1] if lines else "(no output)"
        raise PipDownloadError(
            f"`pip download {' '.join(shown)} {requirement}` failed (exit {done.returncode}): {last}. The package "
            "index could not be reached or does not serve this file; pip's configuration picks the index "
            "(`pip config list`, PIP_INDEX_URL)."
        )
    return got
