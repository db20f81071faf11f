"""Every environment Rollgate can run, found through the entry point group `rollgate.environments`.

An entry point names either an Environment subclass (`math = "pkg.mod:MathEnv"`: one environment,
named after the entry point) or a factory (`reasoning_gym = "pkg.mod:environments"`): a callable
taking no arguments that returns several, as `EnvSpec`s or Environment classes (a list, or a
mapping name -> class). Rollgate's own environments register the same way, in its pyproject.toml.

Nothing is imported at module import. The first listing loads each entry point's target (families
keep their third-party library out of that step: see families/); `load_env` builds one environment.
A plugin that fails to load, or names something that is not an Environment, is kept in `broken`
with its error, and the others load as usual.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rollgate.core.errors import BadRequest, NotFound
from rollgate.core.settings import EnvEntry, Settings
from rollgate.resources_servers.base import Environment

log = logging.getLogger("rollgate.registry")

GROUP = "rollgate.environments"

# (n, seed, config, split) -> task rows; see families/splits.py for what a split is
TaskGenerator = Callable[[int, int, "dict[str, Any] | None", str], list[dict[str, Any]]]


@dataclass(frozen=True)
class EnvSpec:
    """One environment as the registry knows it, before it is built."""

    name: str
    env_class: type[Environment]  # tools and description come from the class, nothing is built
    factory: Callable[..., Environment] | None = None  # default: env_class(**options)
    family: str | None = None
    available: bool = True
    reason: str | None = None  # why it is not available, and the fix
    tasks: TaskGenerator | None = None  # `rollgate tasks` support
    source: str = ""  # the entry point it came from, "name = module:attr"

    def build(self, **options: Any) -> Environment:
        if not self.available:
            raise NotFound(f"environment {self.name!r} is not available: {self.reason}", component="env", field="env")
        env = (self.factory or self.env_class)(**options)
        if not isinstance(env, Environment):
            raise TypeError(
                f"{self.source}: the factory of {self.name!r} built {type(env).__name__}, not an Environment"
            )
        return env

    def tool_names(self) -> list[str]:
        return list(self.env_class.tool_specs())


@dataclass(frozen=True)
class BrokenPlugin:
    """An entry point that could not be loaded: reported by `rollgate envs` and `rollgate doctor`."""

    entry_point: str  # "name = module:attr"
    distribution: str | None
    error: str


def _describe(ep: EntryPoint) -> str:
    return f"{ep.name} = {ep.value}"


def _is_env_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Environment)


def specs_from_entry_point(ep: EntryPoint) -> list[EnvSpec]:
    """The environments one entry point provides. Raises TypeError when it names something else."""
    target = ep.load()
    where = _describe(ep)
    if _is_env_class(target):
        return [EnvSpec(name=ep.name, env_class=target, source=where, tasks=_module_tasks(target))]
    if isinstance(target, type) or not callable(target):
        raise TypeError(
            f"entry point {where!r} names {type(target).__name__} {getattr(target, '__name__', target)!r}: "
            "expected an Environment subclass or a factory returning environments"
        )
    produced = target()
    items: Iterable[Any] = produced.items() if isinstance(produced, Mapping) else produced
    out: list[EnvSpec] = []
    for item in items:
        if isinstance(produced, Mapping):
            name, item = item
        else:
            name = None
        if isinstance(item, EnvSpec):
            out.append(item if item.source else _with_source(item, where))
        elif _is_env_class(item):
            name = name or item.name
            if not name:
                raise TypeError(f"entry point {where!r}: {item.__name__} has no name (set the class attribute `name`)")
            out.append(EnvSpec(name=name, env_class=item, family=ep.name, source=where, tasks=_module_tasks(item)))
        else:
            raise TypeError(
                f"entry point {where!r}: the factory returned {type(item).__name__}, "
                "expected EnvSpec or Environment subclasses"
            )
    return out


def _with_source(spec: EnvSpec, where: str) -> EnvSpec:
    return EnvSpec(**{**spec.__dict__, "source": where})


def _module_tasks(cls: type[Environment]) -> TaskGenerator | None:
    """Single environments generate tasks through their module's `example_tasks(n, seed)`."""
    from rollgate.resources_servers.families.splits import generator_from_examples

    return generator_from_examples(cls)


class _Discovery:
    """What a set of entry points provides, loaded on first use and then fixed: entry points do not
    change while a process runs, so every registry over the same ones shares one discovery."""

    def __init__(self, entry_points: Sequence[EntryPoint] | None):
        self._entry_points = entry_points
        self._lock = threading.Lock()
        self._specs: dict[str, EnvSpec] | None = None
        self.broken: list[BrokenPlugin] = []

    def specs(self) -> dict[str, EnvSpec]:
        if self._specs is None:
            with self._lock:
                if self._specs is None:
                    self._specs = self._load()
        return self._specs

    def _load(self) -> dict[str, EnvSpec]:
        eps = list(self._entry_points) if self._entry_points is not None else list(entry_points(group=GROUP))
        specs: dict[str, EnvSpec] = {}
        # Rollgate's own entry points first, so a plugin cannot silently replace a shipped name.
        eps.sort(key=lambda ep: (getattr(ep.dist, "name", "") != "rollgate", ep.name))
        for ep in eps:
            dist = getattr(ep.dist, "name", None)
            try:
                provided = specs_from_entry_point(ep)
            except Exception as exc:  # a broken plugin is reported, never fatal to the others
                self.broken.append(BrokenPlugin(_describe(ep), dist, f"{type(exc).__name__}: {exc}"))
                log.warning(
                    "environment plugin %r (%s) is broken: %s: %s", _describe(ep), dist, type(exc).__name__, exc
                )
                continue
            for spec in provided:
                if spec.name in specs:
                    self.broken.append(
                        BrokenPlugin(
                            _describe(ep), dist, f"environment name {spec.name!r} is taken by {specs[spec.name].source}"
                        )
                    )
                    continue
                specs[spec.name] = spec
        return dict(sorted(specs.items()))


@dataclass(frozen=True)
class EnvRegistry:
    """The environments of a set of entry points (default: every installed distribution's), plus the
    entries configured in settings (`{name, kind, ...}`, external.py). Never changed once built:
    `with_envs` returns a new registry, so one process can hold several (e.g. tests' stacks)."""

    entry_points: Sequence[EntryPoint] | None = None
    _discovery: _Discovery | None = field(default=None, repr=False, compare=False)
    _configured: Mapping[str, tuple[EnvEntry, EnvSpec]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self._discovery is None:
            object.__setattr__(self, "_discovery", _Discovery(self.entry_points))

    def _installed(self) -> dict[str, EnvSpec]:
        assert self._discovery is not None  # set in __post_init__
        return self._discovery.specs()

    def _specs(self) -> dict[str, EnvSpec]:
        installed = self._installed()
        if not self._configured:
            return installed
        return {**installed, **{name: spec for name, (_, spec) in self._configured.items()}}

    @property
    def broken(self) -> list[BrokenPlugin]:
        self._installed()
        assert self._discovery is not None
        return list(self._discovery.broken)

    def specs(self) -> dict[str, EnvSpec]:
        return dict(self._specs())

    def names(self, *, available_only: bool = True) -> list[str]:
        return [n for n, s in self._specs().items() if s.available or not available_only]

    def get(self, name: str) -> EnvSpec:
        specs = self._specs()
        spec = specs.get(name)
        if spec is None:
            raise NotFound(unknown_message(name, list(specs)), component="env", field="env")
        return spec

    def load(self, name: str, **options: Any) -> Environment:
        return self.get(name).build(**options)

    def with_envs(self, values: Iterable[str | EnvEntry]) -> EnvRegistry:
        """A new registry that also knows the entries among `values` (a setting `envs`: names,
        patterns and entries; an entry is named in errors by its position, `envs[i] (name)`). An entry
        may not take an installed environment's name; one configured here already is replaced."""
        from rollgate.resources_servers.external import spec_from_entry

        installed = self._installed()
        configured = dict(self._configured)
        for i, value in enumerate(values):
            if not isinstance(value, EnvEntry):
                continue
            where = f"envs[{i}] ({value.name})"
            taken = installed.get(value.name)
            if taken is not None:
                raise BadRequest(
                    f"{where}: the name {value.name!r} is taken by the installed environment {taken.source}",
                    component="env",
                    field="envs",
                )
            configured[value.name] = (value, spec_from_entry(value, where))
        if configured == self._configured:
            return self
        return EnvRegistry(self.entry_points, self._discovery, configured)

    def resolve(self, patterns: Iterable[str | EnvEntry]) -> list[str]:
        """Setting values -> environment names (changes nothing). Glob patterns (`*`,
        `reasoning_gym/*`) expand to the available environments they match; a plain name must exist
        (it may be unavailable: building it then says why); an entry counts by its name and must be
        configured in this registry (`with_envs`)."""
        specs = self._specs()
        out: dict[str, None] = {}
        for i, pattern in enumerate(patterns):
            if isinstance(pattern, EnvEntry):
                known = self._configured.get(pattern.name)
                if known is None or known[0] != pattern:
                    raise BadRequest(
                        f"envs[{i}] ({pattern.name}): this entry is not configured in the registry "
                        "(build it with EnvRegistry.with_envs, or registry_for(settings))",
                        component="env",
                        field="envs",
                    )
                out[pattern.name] = None
            elif any(c in pattern for c in "*?["):
                matched = [n for n, s in specs.items() if s.available and fnmatch.fnmatchcase(n, pattern)]
                if not matched:
                    raise BadRequest(f"no available environment matches {pattern!r}", component="env", field="envs")
                out.update(dict.fromkeys(matched))
            elif pattern in specs:
                out[pattern] = None
            else:
                raise NotFound(unknown_message(pattern, list(specs)), component="env", field="envs")
        return list(out)


def unknown_message(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    families = sorted({k.split("/")[0] + "/*" for k in known if "/" in k})
    singles = [k for k in known if "/" not in k]
    return f"unknown environment {name!r}{hint} (known: {', '.join(singles + families)}; see `rollgate envs`)"


@functools.cache
def default_registry() -> EnvRegistry:
    """The installed environments, discovered once per process (entry points do not change while it
    runs; tests that install a plugin run `rollgate` in a subprocess). It holds no configured entries
    and nothing changes it: a registry with settings' entries is `registry_for(settings)`."""
    return EnvRegistry()


def registry_for(settings: Settings) -> EnvRegistry:
    """The installed environments and the entries of `settings.envs` (built at the composition root)."""
    return default_registry().with_envs(settings.envs)


# For library callers: the installed environments only (an entry of settings needs registry_for).
def env_names(*, available_only: bool = True) -> list[str]:
    return default_registry().names(available_only=available_only)


def load_env(name: str, **options: Any) -> Environment:
    return default_registry().load(name, **options)


def resolve_envs(patterns: Iterable[str]) -> list[str]:
    return default_registry().resolve(patterns)
