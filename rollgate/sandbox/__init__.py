"""Isolated code execution: one small interface (`Sandbox`, `SandboxProvider`) and providers
`local` (namespaced processes, the default), `docker` and `kubernetes`, plus a warm pool.

    provider = make_provider("local")              # or "docker", "kubernetes"; pool_size=N for a warm pool
    sandbox = await provider.create()
    result = await sandbox.exec(code="print(1)")   # -> ExecResult(exit_code=0, stdout="1\\n", ...)
    await sandbox.destroy()
"""

from __future__ import annotations

from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.core.metrics import Metrics
from rollgate.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxLimits, SandboxProvider
from rollgate.sandbox.isolation import doctor_check

PROVIDERS = ("local", "docker", "kubernetes")


def make_provider(
    kind: str = "local", *, pool_size: int = 0, metrics: Metrics | None = None, **options: Any
) -> SandboxProvider:
    """Build a provider by name; `options` go to its constructor (limits=..., image=..., ...).
    `pool_size` > 0 puts a WarmPool of that many idle sandboxes in front of it."""
    if kind == "local":
        from rollgate.sandbox.local import LocalProvider as cls
    elif kind == "docker":
        from rollgate.sandbox.docker import DockerProvider as cls  # type: ignore[assignment]
    elif kind == "kubernetes":
        from rollgate.sandbox.kubernetes import KubernetesProvider as cls  # type: ignore[assignment]
    else:
        raise BadRequest(
            f"unknown sandbox provider {kind!r}; known: {', '.join(PROVIDERS)}", component="sandbox", field="provider"
        )
    try:
        provider: SandboxProvider = cls(metrics=metrics, **options)
    except TypeError as exc:
        raise BadRequest(
            f"bad option for the {kind} sandbox provider: {exc}", component="sandbox", field="options"
        ) from None
    if pool_size > 0:
        from rollgate.sandbox.pool import WarmPool

        return WarmPool(provider, pool_size)
    return provider


__all__ = [
    "ExecResult",
    "PROVIDERS",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxProvider",
    "doctor_check",
    "make_provider",
]
