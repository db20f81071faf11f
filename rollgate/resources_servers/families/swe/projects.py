"""The projects of the `swe/<project>` family: small, permissively licensed, pure-Python projects
whose source distributions on the package index carry their own test suites (each runs offline
with pytest alone in a few seconds). Pinned by version and sha256 of the sdist; the source is
fetched into Rollgate's cache at task-build time (sources.py), never kept in Rollgate's repository.

`sources` are the paths (relative to the unpacked sdist) whose modules are mutated; `tests` the
paths holding the test suite; `python_path` the entries the package is imported from.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollgate.core.errors import NotFound

# Files that configure how tests run: a change to any of them (anywhere in the tree) earns 0.
RUNNER_CONFIG = frozenset({"conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "setup.py"})


@dataclass(frozen=True)
class Project:
    name: str  # the family member: swe/<name>
    distribution: str  # package index name
    version: str
    filename: str  # the sdist pip downloads
    sha256: str
    license: str
    sources: tuple[str, ...]
    tests: tuple[str, ...]
    python_path: tuple[str, ...] = (".",)

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    @property
    def top(self) -> str:
        """The directory the sdist unpacks into."""
        return self.filename.removesuffix(".tar.gz")

    def is_test_path(self, path: str) -> bool:
        """A file of the test suite or of its runner's configuration (never to be edited)."""
        name = path.rsplit("/", 1)[-1]
        if name in RUNNER_CONFIG:
            return True
        return any(path == t or path.startswith(t.rstrip("/") + "/") for t in self.tests)

    def in_sources(self, path: str) -> bool:
        """A file of the project's code (any kind, not a test): what verification carries over."""
        inside = any(path == s or path.startswith(s.rstrip("/") + "/") for s in self.sources)
        return inside and not self.is_test_path(path)

    def is_source_path(self, path: str) -> bool:
        """A Python module of the project's code: where bugs are injected."""
        return path.endswith(".py") and self.in_sources(path)


PROJECTS: dict[str, Project] = {
    p.name: p
    for p in [
        Project(
            "cachetools",
            "cachetools",
            "8.0.2",
            "cachetools-8.0.2.tar.gz",
            "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0",
            "MIT",
            sources=("src/cachetools",),
            tests=("tests",),
            python_path=("src",),
        ),
        Project(
            "inflection",
            "inflection",
            "0.5.1",
            "inflection-0.5.1.tar.gz",
            "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
            "MIT",
            sources=("inflection",),
            tests=("test_inflection.py",),
        ),
        Project(
            "parse",
            "parse",
            "1.22.4",
            "parse-1.22.4.tar.gz",
            "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5",
            "MIT",
            sources=("parse",),
            tests=("tests",),
        ),
        Project(
            "semver",
            "semver",
            "3.1.2",
            "semver-3.1.2.tar.gz",
            "bea193552413194252d33ff26ce0962b76669bd1c6fb17e8e203ac37f072feaf",
            "BSD-3-Clause",
            sources=("src/semver",),
            tests=("tests",),
            python_path=("src",),
        ),
        Project(
            "isodate",
            "isodate",
            "0.7.2",
            "isodate-0.7.2.tar.gz",
            "4cd1aa0f43ca76f4a6c6c0292a85f40b35ec2e43e315b59f06e6d32171a953e6",
            "BSD-3-Clause",
            sources=("src/isodate",),
            tests=("tests",),
            python_path=("src",),
        ),
        Project(
            "toolz",
            "toolz",
            "1.2.0",
            "toolz-1.2.0.tar.gz",
            "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
            "BSD-3-Clause",
            sources=("toolz",),
            tests=("toolz/tests", "toolz/sandbox/tests"),
        ),
    ]
}


def get_project(name: str) -> Project:
    found = PROJECTS.get(name)
    if found is None:
        raise NotFound(
            f"unknown swe project {name!r}; known: {', '.join(PROJECTS)}", component="env:swe", field="project"
        )
    return found
