"""`rollgate doctor`: one line per configured part (OK / WARN / FAIL) and, for what is not OK, how
to fix it. Exit status 1 when anything FAILs, so scripts and CI can gate on it."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rollgate.commands.checks import (
    Check,
    CheckResult,
    Status,
    check_config,
    check_env_local,
    check_env_pattern,
    check_env_url,
    check_gateway,
    check_model_dir,
    check_plugins,
    check_redis,
    check_remote_model,
    check_sandbox,
    default_tiny_path,
    describe_error,
    fail,
    ok,
)
from rollgate.core.settings import Settings

if TYPE_CHECKING:
    from rollgate.resources_servers.registry import EnvRegistry


async def _timed(name: str, check: Check, timeout_s: float) -> CheckResult:
    started = time.perf_counter()
    try:
        result = await asyncio.wait_for(check(), timeout_s)
    except TimeoutError:
        result = fail(name, f"no answer within {timeout_s:g}s", "the part hangs or the address is wrong")
    except Exception as exc:  # a crashing check is reported, not raised: the others still print
        result = fail(name, f"the check itself crashed: {describe_error(exc)}", "please report this as a bug")
    result.elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
    return result


def _registry(settings: Settings) -> tuple[EnvRegistry, str | None]:
    """The registry the per-environment checks build from: the installed environments and the
    entries of external ones (`{name, kind, ...}`), checked here. With a bad entry: the installed
    ones alone, and the entry's error."""
    from rollgate.core.errors import RollgateError
    from rollgate.resources_servers.registry import default_registry, registry_for

    try:
        return registry_for(settings), None
    except RollgateError as exc:
        return default_registry(), exc.message


def _in_thread(fn: Callable[..., CheckResult], *args, **kwargs) -> Check:
    # file reads, imports and subprocess probes block: keep them off the loop the HTTP checks use
    return lambda: asyncio.to_thread(fn, *args, **kwargs)


async def run_checks(
    settings: Settings, *, config_file: str | None = None, gateway_url: str | None = None, timeout_s: float = 5.0
) -> list[CheckResult]:
    """Every check that applies to `settings`, in a stable order."""
    gateway_url = gateway_url or settings.gateway_url
    # Our token goes to our own services only, never to an upstream (vLLM, OpenAI) server.
    auth = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else None
    checks: list[tuple[str, Check]] = [
        ("config", _in_thread(check_config, settings, config_file)),
        ("redis", lambda: check_redis(settings.redis_url, timeout_s)),
    ]
    if gateway_url:
        checks.append(("gateway", lambda: check_gateway(gateway_url, timeout_s, auth)))
    checks.extend(_model_checks(settings, timeout_s, auth))
    checks.append(("plugins", _in_thread(check_plugins)))
    registry, entries_error = _registry(settings)
    if entries_error:
        checks.append(("envs", _in_thread(fail, "envs", entries_error, "fix that entry of envs (docs/interop.md)")))
    for env in dict.fromkeys([*settings.env_names, *settings.env_urls]):
        urls = settings.env_urls.get(env)
        if urls:
            checks.extend((f"env:{env}", (lambda e=env, u=u: check_env_url(e, u, timeout_s, auth))) for u in urls)
        elif any(c in env for c in "*?["):
            checks.append((f"envs:{env}", _in_thread(check_env_pattern, env, registry)))
        else:
            checks.append((f"env:{env}", _in_thread(check_env_local, env, registry)))
    # the probe forks a few short processes; 10 s covers a slow host
    checks.append(("sandbox", _in_thread(check_sandbox)))
    return list(
        await asyncio.gather(*(_timed(n, c, max(timeout_s, 10.0) if n == "sandbox" else timeout_s) for n, c in checks))
    )


def _model_checks(settings: Settings, timeout_s: float, auth: dict[str, str] | None) -> list[tuple[str, Check]]:
    m = settings.model
    tiny = default_tiny_path(settings)
    out: list[tuple[str, Check]] = []
    if settings.model_url:
        out.append(
            ("model", lambda: check_remote_model("model", settings.model_url, timeout_s, m.served_name, headers=auth))
        )
    elif m.backend == "local":
        path = Path(m.model_path)
        # The default model path is the tiny model, which the server builds when missing.
        is_tiny = path == tiny
        out.append(("model", _in_thread(check_model_dir, "model", path, missing_is_fail=not is_tiny)))
        if is_tiny:
            return out
    elif m.backend in ("vllm", "openai"):
        if not m.upstream_urls:
            out.append(
                (
                    "model",
                    _in_thread(
                        lambda: fail("model", f"backend {m.backend} has no upstream server", "set model.upstream_urls")
                    ),
                )
            )
        for i, url in enumerate(m.upstream_urls):
            out.append(
                (
                    f"model[{i}]",
                    lambda u=url, i=i: check_remote_model(
                        f"model[{i}]", u, timeout_s, m.upstream_model, upstream=True, api_key=m.upstream_api_key
                    ),
                )
            )
    else:
        out.append(("model", _in_thread(lambda: ok("model", f"backend {m.backend} (no server to check)"))))
    out.append(("tiny-model", _in_thread(check_model_dir, "tiny-model", tiny, missing_is_fail=False)))
    return out


def exit_code(results: list[CheckResult]) -> int:
    return 1 if any(r.status is Status.fail for r in results) else 0


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML settings file (also ROLLGATE_CONFIG)")
    p.add_argument("--gateway", metavar="URL", help="also check a running gateway (default: gateway_url setting)")
    p.add_argument("--redis-url", metavar="URL", help="check this Redis instead of the configured one")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="time limit of each check (default 5)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON array")


def format_result(r: CheckResult, width: int) -> str:
    line = f"{r.status.value:<5} {r.name:<{width}} {r.detail}"
    if r.fix and r.status is not Status.ok:
        line += f"\n{'':<5} {'':<{width}} fix: {r.fix}"
    return line


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.load(args.config, redis_url=args.redis_url)
    except Exception as exc:  # a broken config is the first thing doctor must explain, not a traceback
        print(
            f"FAIL  config  cannot load settings: {type(exc).__name__}: {exc}\n"
            "      fix: check the YAML file and the ROLLGATE_* variables",
            file=sys.stderr,
        )
        return 1
    results = asyncio.run(
        run_checks(settings, config_file=args.config, gateway_url=args.gateway, timeout_s=args.timeout)
    )
    if args.json:
        from rollgate.core import jsonutil

        print(jsonutil.dumps_str([r.model_dump(mode="json") for r in results]))
    else:
        width = max(len(r.name) for r in results)
        for r in results:
            print(format_result(r, width))
        failed = sum(r.status is Status.fail for r in results)
        warned = sum(r.status is Status.warn for r in results)
        print(f"\n{len(results)} checks: {failed} failed, {warned} warning(s)")
    return exit_code(results)
