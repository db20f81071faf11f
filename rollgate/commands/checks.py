"""`rollgate doctor`: check each configured part and say how to fix what fails.

Every check is a small coroutine returning one `CheckResult` (OK / WARN / FAIL, what was seen,
and for anything not OK the fix). Checks run concurrently, each under its own time limit, and a
check that crashes is itself a FAIL naming the exception, so one broken part never hides the
report on the others. Nothing here changes state: PING, GET, file reads and probes only.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel

from rollgate.core.errors import UpstreamError, UpstreamTimeout
from rollgate.core.http import HttpClient
from rollgate.core.settings import Settings
from rollgate.jobs.redis_loss import persistence_problem

if TYPE_CHECKING:
    from rollgate.resources_servers.registry import EnvRegistry


class Status(str, enum.Enum):
    ok = "OK"
    warn = "WARN"
    fail = "FAIL"


class CheckResult(BaseModel):
    name: str
    status: Status
    detail: str
    fix: str | None = None
    elapsed_ms: float = 0.0


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, status=Status.ok, detail=detail)


def warn(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name=name, status=Status.warn, detail=detail, fix=fix)


def fail(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name=name, status=Status.fail, detail=detail, fix=fix)


def redact(url: str) -> str:
    """A URL fit to print: any password is replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ---- Redis ----------------------------------------------------------------------------------


async def check_redis(url: str | None, timeout_s: float) -> CheckResult:
    if not url:
        return ok("redis", "not configured: sessions and the job queue are in memory (embedded shape only)")
    import redis.asyncio as aioredis
    from redis.exceptions import AuthenticationError, RedisClusterException, RedisError

    from rollgate.core.redis_client import cluster_client, is_cluster_url

    shown = redact(url)
    try:
        if is_cluster_url(url):
            client = cluster_client(url, max_connections=4, socket_timeout=timeout_s)
        else:
            client = aioredis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    except ValueError as exc:
        return fail(
            "redis",
            f"redis URL {shown} is malformed: {exc}",
            "use redis://HOST:PORT/DB (or rediss:// for TLS; redis+cluster://HOST:PORT,HOST:PORT for a "
            "Redis Cluster) in --redis-url / ROLLGATE_REDIS_URL",
        )
    started = time.perf_counter()
    try:
        await client.ping()
        info = await client.info("server")
        problem = await persistence_problem(client)
    except AuthenticationError as exc:
        return fail(
            "redis",
            f"{shown} refused the credentials: {exc}",
            "put the right password in the URL (redis://:PASSWORD@HOST:PORT/0)",
        )
    except (RedisError, RedisClusterException, OSError) as exc:
        return fail(
            "redis",
            f"cannot reach {shown}: {describe_error(exc)}",
            "start Redis (e.g. `redis-server --port 6379`) or point --redis-url / ROLLGATE_REDIS_URL "
            "at a running server",
        )
    finally:
        await client.aclose()
    ms = (time.perf_counter() - started) * 1000
    seen = f"{shown} answered PING ({ms:.1f} ms, Redis {info.get('redis_version', '?')})"
    if problem:
        # The job queue lives in Redis: without an append-only file a restart loses running jobs
        # (they end `failed` rather than hang, but their episodes are gone).
        return warn(
            "redis",
            f"{seen}; {problem}",
            "run Redis with `--appendonly yes` (the shipped compose.yaml and k8s Redis do), or "
            "`CONFIG SET appendonly yes` followed by `CONFIG REWRITE`",
        )
    return ok("redis", seen)


# ---- HTTP services ----------------------------------------------------------------------------


async def check_http_service(
    name: str,
    base_url: str,
    timeout_s: float,
    *,
    fix: str,
    extra_path: str | None = None,
    health_path: str | None = "/healthz",
    headers: dict[str, str] | None = None,
) -> tuple[CheckResult, object]:
    """GET `health_path` (and `extra_path`, returning its JSON) through the project's HTTP client,
    whose retry policy tries a refused connection again within `timeout_s`. Never raises."""
    base = base_url.rstrip("/")
    shown = redact(base)
    client = HttpClient(base, component=name, timeout_s=timeout_s, headers=headers, content_type=None)
    try:
        for path in [p for p in (health_path, extra_path) if p]:
            try:
                reply = await client.send("GET", path, idempotent=True)
            except UpstreamTimeout:
                return fail(name, f"cannot reach {shown}{path}: no answer within {timeout_s:g}s", fix), None
            except UpstreamError as exc:  # the client's message names the URL: show it redacted
                return fail(name, f"cannot reach {shown}{path}: {exc.message.replace(base, shown)}", fix), None
            if reply.status == 401:
                set_key = "set api_key (ROLLGATE_API_KEY) to the token the service expects"
                return fail(name, f"{shown}{path} answered 401 (unauthorized)", set_key), None
            if reply.status != 200:
                hint = (
                    "the service is up but not ready: read its log (it may still be loading)"
                    if path == health_path and reply.status == 503
                    else f"{shown} may not be a Rollgate {name} (wrong URL or port?)"
                )
                text = reply.body.decode(errors="replace")[:200]
                return fail(name, f"{shown}{path} answered {reply.status}: {text}", hint), None
    finally:
        await client.close()
    if extra_path is None:
        return ok(name, f"{shown} healthy"), None
    try:
        return ok(name, f"{shown} healthy"), reply.json()
    except ValueError:  # orjson's JSONDecodeError is one
        not_ours = f"{shown} may not be a Rollgate {name} (wrong URL or port?)"
        return fail(name, f"{shown}{extra_path} did not answer JSON", not_ours), None


async def check_gateway(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> CheckResult:
    result, body = await check_http_service(
        "gateway",
        url,
        timeout_s,
        extra_path="/v1/rollouts",
        headers=headers,
        fix="start it (`rollgate serve`) or fix --gateway / ROLLGATE_GATEWAY_URL",
    )
    if result.status is Status.ok:
        result.detail += "; /v1/rollouts answered (auth accepted)"
    return result


def _model_ids(body: object) -> list[str]:
    data = body.get("data", []) if isinstance(body, dict) else []
    return [m.get("id", "?") for m in data if isinstance(m, dict)]


async def check_remote_model(
    name: str,
    url: str,
    timeout_s: float,
    expect: str | None,
    *,
    upstream: bool = False,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
) -> CheckResult:
    """A Rollgate model server (GET /healthz + /v1/models) or an upstream OpenAI-compatible one
    (vLLM, OpenAI: /v1/models only; their health routes differ and a model list proves more)."""
    models = "/models" if url.rstrip("/").endswith("/v1") else "/v1/models"
    result, body = await check_http_service(
        name,
        url,
        timeout_s,
        extra_path=models,
        health_path=None if upstream else "/healthz",
        headers={"authorization": f"Bearer {api_key}"} if api_key else headers,
        fix="start the model server (`rollgate serve --role model`) or fix model_url / model.upstream_urls",
    )
    if result.status is not Status.ok:
        return result
    ids = _model_ids(body)
    if not ids:
        return fail(name, f"{redact(url)}{models} lists no model", "check the model server's log: no model loaded")
    if expect and expect not in ids:
        return warn(
            name,
            f"{redact(url)} serves {ids}, not {expect!r}",
            "set model.served_name (or model.upstream_model) to one of the served ids",
        )
    return ok(name, f"{redact(url)} healthy, serves {', '.join(ids)}")


async def check_env_url(env: str, url: str, timeout_s: float, headers: dict[str, str] | None = None) -> CheckResult:
    name = f"env:{env}"
    result, body = await check_http_service(
        name,
        url,
        timeout_s,
        extra_path="/tools",
        headers=headers,
        fix=f"start it (`rollgate serve --role resources --env {env}`) or fix env_urls.{env}",
    )
    if result.status is not Status.ok:
        return result
    if not isinstance(body, list):
        return fail(
            name,
            f"{redact(url)}/tools did not answer a list of tool schemas",
            f"env_urls.{env} may point at another service",
        )
    return ok(name, f"{redact(url)} healthy, {len(body)} tool(s)")


# ---- in-process parts ---------------------------------------------------------------------------


def check_env_local(env: str, registry: EnvRegistry) -> CheckResult:
    from rollgate.resources_servers.registry import unknown_message

    name = f"env:{env}"
    known = registry.names(available_only=False)
    if env not in known:
        message = unknown_message(env, known)
        return fail(name, message.split(" (known:")[0], f"set envs to known ones ({message.split('(known: ')[-1]}")
    try:
        loaded = registry.load(env)
        tools = loaded.tool_schemas()
    except UpstreamError as exc:  # a configured environment's server: Rollgate's install is fine
        return fail(
            name,
            f"cannot load in-process: {describe_error(exc)}",
            "start or fix the environment's server; an MCP stdio server may need the entry's `cwd` and "
            "`env` (docs/interop.md)",
        )
    except Exception as exc:  # an environment's import or constructor failing is exactly what we report
        return fail(
            name,
            f"cannot load in-process: {describe_error(exc)}",
            "reinstall Rollgate (`pip install -e .`) and read the traceback: "
            f"python -c \"from rollgate.resources_servers.registry import load_env; load_env('{env}')\"",
        )
    return ok(name, f"loads in-process, {len(tools)} tool(s)")


def check_env_pattern(pattern: str, registry: EnvRegistry) -> CheckResult:
    """A glob of setting envs ("*", "reasoning_gym/*"): every environment it selects builds."""
    name = f"envs:{pattern}"
    try:
        names = registry.resolve([pattern])
    except Exception as exc:  # an unmatched pattern is the finding
        return fail(name, describe_error(exc), "see `rollgate envs` for what is installed and available")
    failed = []
    for env in names:
        try:
            registry.load(env)
        except Exception as exc:  # one environment failing to build is reported with the others
            failed.append(f"{env}: {describe_error(exc)}")
    if failed:
        return fail(name, f"{len(failed)} of {len(names)} do not load: {'; '.join(failed[:3])}", "see `rollgate envs`")
    return ok(name, f"{len(names)} environments load in-process")


def check_plugins() -> CheckResult:
    """Entry points of group rollgate.environments that fail to load (a broken plugin)."""
    from rollgate.resources_servers.registry import default_registry

    registry = default_registry()
    broken = registry.broken
    specs = registry.specs()
    if not any(s.source.split(" = ")[0] in ("math", "reasoning_gym") for s in specs.values()):
        return fail(
            "plugins",
            "Rollgate's own environments are missing from the entry points (install metadata predates them)",
            "reinstall Rollgate: `pip install -e .` (or `pip install rollgate`)",
        )
    if broken:
        detail = "; ".join(f"{b.entry_point} ({b.distribution}): {b.error}" for b in broken)
        return fail("plugins", f"{len(broken)} environment plugin(s) fail to load: {detail}", "fix or uninstall them")
    unavailable = sum(not s.available for s in specs.values())
    return ok("plugins", f"{len(specs)} environments ({unavailable} not available here: `rollgate envs`)")


def default_tiny_path(settings: Settings) -> Path:
    return Path(settings.default_model_path)


def check_model_dir(name: str, path: Path, *, missing_is_fail: bool) -> CheckResult:
    """A transformers model directory: config.json parses, tokenizer.json loads, weights exist.
    Reads files only (no torch), so it takes milliseconds."""
    if not path.is_dir():
        fix = (
            f"build it: `rollgate model tiny --out {path}`"
            if not missing_is_fail and path.name == "tiny-model"
            else f"point model.model_path at a transformers model directory, or `rollgate model tiny --out {path}`"
        )
        detail = f"no model directory at {path}"
        return fail(name, detail, fix) if missing_is_fail else warn(name, detail + " (built on first use)", fix)
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return fail(
            name,
            f"{path}/config.json unreadable: {describe_error(exc)}",
            "the directory is not a complete transformers model: rebuild or re-copy it",
        )
    try:
        from tokenizers import Tokenizer

        vocab = Tokenizer.from_file(str(path / "tokenizer.json")).get_vocab_size()
    except Exception as exc:  # tokenizers raises its own untyped exceptions
        return fail(
            name,
            f"{path}/tokenizer.json does not load: {describe_error(exc)}",
            "rebuild the model directory (the tokenizer file is damaged or missing)",
        )
    weights = sorted(p.name for p in path.glob("*.safetensors")) or sorted(p.name for p in path.glob("*.bin"))
    if not weights:
        return fail(name, f"{path} has no weights (*.safetensors)", "rebuild or re-copy the model directory")
    return ok(name, f"{path}: {config.get('model_type', '?')} model, vocab {vocab}, weights {', '.join(weights)}")


def check_sandbox() -> CheckResult:
    try:
        from rollgate.sandbox.isolation import doctor_check
    except ImportError as exc:
        return warn(
            "sandbox",
            f"the sandbox package offers no isolation check ({describe_error(exc)})",
            "reinstall Rollgate (`pip install -e .`)",
        )
    report = doctor_check()
    if report.get("ok"):
        return ok("sandbox", str(report.get("detail", "isolated")))
    # A WARN, not a FAIL: everything still runs; only untrusted code (the `code` env) is exposed.
    return warn(
        "sandbox",
        str(report.get("detail", "not isolated")),
        "run the sandbox as root or with user namespaces allowed "
        "(sysctl kernel.unprivileged_userns_clone=1), or use a container provider",
    )


def check_config(settings: Settings, config_file: str | None) -> CheckResult:
    source = f"settings from {config_file}" if config_file else "settings from defaults and ROLLGATE_* variables"
    distributed = bool(settings.redis_url or settings.model_url or settings.env_urls)
    if distributed and not settings.api_key:
        return warn(
            "config",
            f"{source}; distributed parts are configured but api_key is unset",
            "set api_key (ROLLGATE_API_KEY): every role but the embedded one requires a bearer token",
        )
    return ok("config", source)


# ---- running them -------------------------------------------------------------------------------


Check = Callable[[], Awaitable[CheckResult]]
