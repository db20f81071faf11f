"""Isolated code execution: one small interface (`Sandbox`, `SandboxProvider`) and providers
`local` (namespaced processes, the default), `docker`, `kubernetes` and `remote` (a sandbox
service, `rollgate serve --role sandbox`), plus a warm pool.

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

PROVIDERS = ("local", "docker", "kubernetes", "remote")


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
    elif kind == "remote":
        from rollgate.sandbox.remote import RemoteProvider as cls  # type: ignore[assignment]
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


def check_isolation(
    provider: SandboxProvider, *, allow_unisolated: bool = False, user: str = "the code environment"
) -> None:
    """Refuse a provider that cannot isolate model-written code, unless explicitly allowed.

    The error says why (what the host lacks) and how to fix it; with `allow_unisolated` the
    provider's own start-up warning is all that remains."""
    caps = provider.capabilities()
    if allow_unisolated:
        return
    if caps.get("network_isolated") is not False and caps.get("private_root") is False:
        raise SandboxError(
            f"{user} will not run model-written code on the host's own root filesystem: the {provider.name} "
            f"sandbox provider has no private root here ({caps.get('detail', '')}), so the code could read "
            "Rollgate's source, the task data (hidden tests, expected values) and every world-readable file. "
            "Install bubblewrap (apt-get install bubblewrap; docs/sandbox.md), use another provider, or, where "
            "that exposure is acceptable, set sandbox.allow_unisolated: true "
            "(ROLLGATE_SANDBOX__ALLOW_UNISOLATED=true).",
            field="sandbox.allow_unisolated",
        )
    if caps.get("network_isolated") is not False:
        return
    raise SandboxError(
        f"{user} will not run model-written code unisolated: the {provider.name} sandbox provider cannot "
        f"isolate it on this host ({caps.get('detail', 'no namespaces')}), so the code could reach the network "
        "(Redis, the other services) and every file this service can read. Fix one of: run where namespaces are "
        "allowed (as root, or with unprivileged user namespaces enabled); use a provider that isolates "
        "(sandbox.provider: remote with a sandbox service, docker or kubernetes; see docs/sandbox.md); or, where "
        "exposing this machine is acceptable, set sandbox.allow_unisolated: true "
        "(ROLLGATE_SANDBOX__ALLOW_UNISOLATED=true).",
        field="sandbox.allow_unisolated",
    )


__all__ = [
    "ExecResult",
    "PROVIDERS",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxProvider",
    "check_isolation",
    "doctor_check",
    "make_provider",
]
