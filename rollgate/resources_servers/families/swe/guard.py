"""A pytest plugin that the swe verifier loads (`-p rollgate_guard`) into its run of the suite, where
the model's code is imported into the same process as pytest. It is copied into the verification
tree as `rollgate_guard.py` and imports nothing of Rollgate.

It stops three tricks that reading pytest's printed report (`PASSED tests/...` lines) let through:
- a fake report: it writes its own, once, after the session, to a copy of the real stdout taken
  before any project code ran, marked with a one-time nonce that it removes from the environment
  first; lines without the nonce are not read, and no report at all (the process exited early) is
  a failed run;
- a patched runner: it keeps the identity of pytest's and pluggy's report, runner and hook
  machinery as loaded, and reports every entry that changed (a TestReport that always says
  "passed", a Function.runtest that turns failures into xfail);
- a pytest plugin registered from a module the model changed (a hook that rewrites reports);
- test files rewritten on disk while the suite runs (checked after each module is collected), or
  an import hook from outside the standard library, the runner and the project's unchanged files
  that could rewrite them as they load.
Outcomes are its own, per test: passed, failed, skipped, xfailed (a declared xfail marker),
xfail_called (pytest.xfail called at run time, which project code can do) or xpassed.

An attacker who reads this file can still aim at the plugin itself; it raises the bar for the
generic tricks a policy finds by trial, it does not make one process safe from the code it runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

import pytest

ENV_NONCE = "ROLLGATE_GUARD_NONCE"
MARK = "ROLLGATE-GUARD"
_NONCE = os.environ.pop(ENV_NONCE, "")
_OUT = os.dup(1)  # taken before pytest's capture and before any project code runs
_WORKDIR = os.path.realpath(os.getcwd())
_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str, default):
    try:
        with open(os.path.join(_HERE, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


# the files the model changed (only these may not register plugins), and the sha256 of each test
# and runner-configuration file as the verifier wrote it (none may change while the suite runs)
_CHANGED = {os.path.realpath(os.path.join(_WORKDIR, p)) for p in _load("changed.json", [])}
_PROTECTED: dict = _load("protected.json", {})
_altered: set[str] = set()
# import machinery may be added to only from the standard library, the runner (pytest's own
# assertion-rewriting hook) and files of the project the model did not change: a finder from
# anywhere else could hand pytest rewritten test modules
_TRUSTED_ROOTS = tuple(
    os.path.realpath(os.path.dirname(p)) + os.sep for p in (os.__file__, os.path.dirname(pytest.__file__))
)
_IMPORT_HOOKS_AT_START = {id(h) for h in (*sys.meta_path, *sys.path_hooks)}
_PROJECT_ROOT = os.path.realpath(_WORKDIR) + os.sep
_foreign_importers: set[str] = set()


def _check_importers() -> None:
    for hook in (*sys.meta_path, *sys.path_hooks):
        if id(hook) in _IMPORT_HOOKS_AT_START:
            continue
        target = getattr(hook, "__func__", hook)  # a bound method: its function
        owner = target if isinstance(target, type) or hasattr(target, "__code__") else type(target)
        name = getattr(owner, "__module__", None) or ""
        mod = sys.modules.get(name)
        origin = getattr(getattr(mod, "__spec__", None), "origin", None)
        where = os.path.realpath(getattr(mod, "__file__", None) or "/nonexistent")
        if origin in ("frozen", "built-in") or where.startswith(_TRUSTED_ROOTS):
            continue
        if where.startswith(_PROJECT_ROOT) and where not in _CHANGED:
            continue  # the project's own code as published (toolz's tlz package installs a loader)
        _foreign_importers.add(f"{name}.{getattr(owner, '__qualname__', '?')}")


def _check_files() -> None:
    for path, digest in _PROTECTED.items():
        try:
            with open(os.path.join(_WORKDIR, path), "rb") as f:
                same = hashlib.sha256(f.read()).hexdigest() == digest
        except OSError:
            same = False
        if not same:
            _altered.add(path)


_WATCHED_MODULES = (
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.python",
    "_pytest.skipping",
    "_pytest.outcomes",
    "_pytest.main",
    "_pytest.terminal",
    "_pytest.nodes",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "_pytest.assertion.rewrite",
    "_pytest.pathlib",
    "_frozen_importlib",
    "_frozen_importlib_external",
)
# single attributes whose replacement changes how test modules are found, compiled or loaded
_WATCHED_ATTRS = ("sys.pycache_prefix", "builtins.__import__", "builtins.compile", "builtins.exec")


def _watched() -> dict[str, object]:
    """Every function and class of the watched modules, and every attribute of their classes."""
    out: dict[str, object] = {}
    for mod_name in _WATCHED_MODULES:
        mod = sys.modules.get(mod_name)
        if mod is None:
            try:
                mod = __import__(mod_name, fromlist=["_"])
            except ImportError:
                continue
        for name, obj in list(vars(mod).items()):
            if callable(obj) and getattr(obj, "__module__", None) == mod_name:
                out[f"{mod_name}.{name}"] = obj
                if isinstance(obj, type):
                    for attr, value in list(vars(obj).items()):
                        if not attr.startswith("__") or attr in ("__init__", "__call__", "__new__"):
                            out[f"{mod_name}.{name}.{attr}"] = value
    for key in _WATCHED_ATTRS:
        out[key] = _current(key)
    return out


def _current(key: str) -> object:
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            continue
        obj: object = mod
        for j, part in enumerate(parts[i:]):
            last = j == len(parts[i:]) - 1
            space = vars(obj) if isinstance(obj, type) and last else None
            obj = space.get(part, _MISSING) if space is not None else getattr(obj, part, _MISSING)
            if obj is _MISSING:
                return obj
        return obj
    return _MISSING


_MISSING = object()
_SNAPSHOT = _watched()
_outcomes: dict[str, str] = {}
_foreign: list[str] = []
_declared_xfail: set[str] = set()
# the worst outcome of a test's phases (setup, call, teardown) is its outcome
_RANK = {"passed": 0, "xfailed": 1, "skipped": 2, "xfail_called": 3, "xpassed": 4, "failed": 5}


def _outcome(report) -> str:
    if getattr(report, "wasxfail", None) is not None:
        if not report.skipped:
            return "xpassed"
        return "xfailed" if report.nodeid in _declared_xfail else "xfail_called"
    return "passed" if report.passed else "failed" if report.failed else "skipped"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("xfail") is not None:
        _declared_xfail.add(item.nodeid)


def pytest_runtest_logreport(report):
    got = _outcome(report)
    before = _outcomes.get(report.nodeid, "passed")
    _outcomes[report.nodeid] = got if _RANK[got] >= _RANK[before] else before


def pytest_plugin_registered(plugin, manager):
    name = getattr(plugin, "__file__", None) or getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
    if name and os.path.realpath(name) in _CHANGED:
        _foreign.append(os.path.relpath(os.path.realpath(name), _WORKDIR))


def pytest_collectreport(report):
    _check_files()  # after each module's import: a test file rewritten before it was read shows here
    _check_importers()


def pytest_collection_finish(session):
    _check_files()
    _check_importers()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    _check_files()
    _check_importers()
    changed = sorted(k for k, v in _SNAPSHOT.items() if _current(k) is not v)
    report = {
        "outcomes": _outcomes,
        "changed": changed[:20],
        "foreign_plugins": sorted(set(_foreign))[:20],
        "altered_files": sorted(_altered)[:20],
        "foreign_importers": sorted(_foreign_importers)[:20],
    }
    with contextlib.suppress(OSError):
        os.write(_OUT, f"\n{MARK} {_NONCE} {json.dumps(report, sort_keys=True)}\n".encode())
