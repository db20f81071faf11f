"""Environments configured by entry, not installed: `envs: [{name, kind, ...}]` in the settings.

    envs:
      - math                                              # an installed environment, by name
      - {name: ng_weather, kind: nemo_gym, urls: ["http://127.0.0.1:9001"]}
      - {name: echo, kind: openenv, url: "http://127.0.0.1:9002"}
      - {name: notes, kind: mcp, command: ["python", "notes_server.py"], verifier: "my_envs.notes:verify"}

Each kind is a module of interop/ with `spec_from_config(options, where) -> EnvSpec`: `options`
is the entry without its `kind` (the name included). It checks them (its errors start with
`where`, e.g. "envs[1] (ng_weather).urls") and says how to build the environment. Nothing is
contacted here: building the environment (start-up of the process that serves it) reaches the
external server, and fails there naming it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from rollgate.core.errors import BadRequest, field_error
from rollgate.core.settings import EnvEntry

if TYPE_CHECKING:
    from rollgate.resources_servers.base import Environment
    from rollgate.resources_servers.registry import EnvSpec

E = TypeVar("E", bound=BaseModel)

# kind -> "module:function" building its EnvSpec; imported only when an entry of that kind is used
KINDS: dict[str, str] = {
    "nemo_gym": "rollgate.resources_servers.interop.nemo_gym:spec_from_config",
    "openenv": "rollgate.resources_servers.interop.openenv_env:spec_from_config",
    "mcp": "rollgate.resources_servers.interop.mcp_config:spec_from_config",
}


def entry_where(entry: EnvEntry, index: int | None = None) -> str:
    """How errors name an entry: `envs[2] (ng_weather)`."""
    at = f"envs[{index}]" if index is not None else "envs"
    return f"{at} ({entry.name})"


def spec_from_entry(entry: EnvEntry | dict[str, Any], where: str | None = None) -> EnvSpec:
    """The EnvSpec of one configured entry. Raises BadRequest naming the entry and the field."""
    if not isinstance(entry, EnvEntry):
        try:
            entry = EnvEntry.model_validate(entry)
        except ValueError as exc:
            raise BadRequest(f"{where or 'envs'}: {exc}", component="env", field="envs") from None
    where = where or entry_where(entry)
    target = KINDS.get(entry.kind)
    if target is None:
        raise BadRequest(
            f"{where}.kind: unknown environment kind {entry.kind!r} (known: {', '.join(sorted(KINDS))})",
            component="env",
            field="envs",
        )
    module, attr = target.split(":")
    try:
        build: Callable[[dict[str, Any], str], EnvSpec] = getattr(importlib.import_module(module), attr)
    except ImportError as exc:  # the kind's SDK is an optional extra
        raise BadRequest(
            f"{where}.kind: the {entry.kind!r} kind cannot load ({exc}); pip install 'rollgate[interop]'",
            component="env",
            field="envs",
        ) from None
    spec = build({"name": entry.name, **entry.options}, where)
    if spec.name != entry.name:
        spec = type(spec)(**{**spec.__dict__, "name": entry.name})
    return spec


# --- for the kinds' spec_from_config ----------------------------------------------------------


def parse_options(model: type[E], options: dict[str, Any], where: str) -> E:
    """A kind's options, validated; the first error names the entry and the field."""
    try:
        return model.model_validate(options)
    except ValidationError as exc:
        raise field_error(exc, component="env", prefix=where, default=where, field="envs") from None


def configured_spec(
    base: type[Environment],
    *,
    name: str,
    kind: str,
    description: str,
    where: str,
    build: Callable[[type[Environment]], Environment],
    available: bool = True,
    reason: str | None = None,
) -> EnvSpec:
    """The EnvSpec of an entry: a subclass of the kind's environment named after the entry (its
    tools and description are what `rollgate envs` lists), built by `build(subclass)`."""
    from rollgate.resources_servers.registry import EnvSpec

    cls = type(f"{kind}_{name}", (base,), {"name": name, "description": description, "__module__": base.__module__})
    return EnvSpec(
        name=name,
        env_class=cls,
        factory=lambda **_: build(cls),
        family=kind,
        available=available,
        reason=reason,
        source=f"config {where}",
    )
