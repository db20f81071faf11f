"""Builders for the model role: `build_service(settings)` (in process, used by the embedded shape)
and `build_app(settings)` (`rollgate serve --role model`)."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from rollgate.core.metrics import Metrics
from rollgate.core.settings import Settings
from rollgate.model_server.service import ModelService

log = logging.getLogger("rollgate.model_server.server")


def build_backend(settings: Settings, metrics: Metrics | None = None):
    m = settings.model
    if m.backend == "local":
        from rollgate.model_server.local import LocalBackend
        from rollgate.model_server.tiny import ensure_tiny_model, is_model_dir

        path = m.model_path
        if _is_default_tiny(settings):
            log.info("building the tiny model at %s (first use)", path)
            path = str(ensure_tiny_model(path))
        elif not is_model_dir(path):
            raise ValueError(
                f"settings.model.model_path {path!r} holds no model (config.json, tokenizer, "
                "weights); build the tiny model with `rollgate model tiny --out DIR`"
            )
        return LocalBackend.from_pretrained(
            path,
            device=m.device,
            max_batch_size=m.max_batch_size,
            batch_window_ms=m.batch_window_ms,
            max_queue=m.max_queue,
            metrics=metrics,
            kv_reuse=m.kv_reuse,
            kv_cache_mb=m.kv_cache_mb,
            guide_backend=m.guide_backend,
        )
    if m.backend == "scripted":
        from rollgate.model_server.scripted import ScriptedBackend

        return ScriptedBackend.from_path(m.model_path)
    if not m.upstream_urls:
        raise ValueError(
            f"model backend {m.backend!r} needs settings.model.upstream_urls "
            "(ROLLGATE_MODEL__UPSTREAM_URLS='[\"http://host:port\"]')"
        )
    if m.backend == "vllm":
        from transformers import AutoConfig, AutoTokenizer

        from rollgate.model_server.vllm import VllmBackend

        # The tokenizer must be the upstream model's: the service builds prompt ids with it.
        tokenizer = AutoTokenizer.from_pretrained(m.model_path)
        config = AutoConfig.from_pretrained(m.model_path)
        return VllmBackend(
            m.upstream_urls,
            tokenizer,
            model=m.upstream_model or m.model_path,
            timeout_s=m.timeout_s,
            health_interval_s=m.health_interval_s,
            api_key=m.upstream_api_key,
            max_context=getattr(config, "max_position_embeddings", None),
        )
    from rollgate.model_server.passthrough import OpenAIPassthrough

    return OpenAIPassthrough(
        m.upstream_urls[0], api_key=m.upstream_api_key, model=m.upstream_model, timeout_s=m.timeout_s
    )


def _is_default_tiny(settings: Settings) -> bool:
    # Build the tiny model on first use only where it is expected (a path with no model yet).
    from rollgate.model_server.tiny import is_current

    return not is_current(settings.model.model_path) and settings.model.model_path.rstrip("/").endswith("tiny-model")


def build_service(settings: Settings, metrics: Metrics | None = None) -> ModelService:
    from rollgate.model_server.templates import resolve_chat_template

    m = settings.model
    resolve_chat_template(m.chat_template)  # a bad setting fails before the model loads
    backend = build_backend(settings, metrics)
    aliases = (m.upstream_model,) if m.upstream_model else ()
    return ModelService(
        backend,
        served_name=m.served_name,
        default_max_output_tokens=m.default_max_output_tokens,
        training_mode=m.training_mode,
        max_context_tokens=m.max_context_tokens,
        metrics=metrics,
        aliases=aliases,
        chat_template=resolve_chat_template(m.chat_template),
        tool_call_format=m.tool_call_format,
        reasoning_format=m.reasoning_format,
    )


def build_app(settings: Settings) -> FastAPI:
    from rollgate.core.auth import configured_key, require_bearer
    from rollgate.model_server.app import create_model_app
    from rollgate.model_server.weights import AdminAuth

    metrics = Metrics()
    # Weight updates always need the token (AdminAuth refuses them when none is configured);
    # with a key configured, every other route needs it too (its WebSockets and channel included).
    auth = AdminAuth(settings.api_key, enabled=settings.gateway.auth)
    app = create_model_app(build_service(settings, metrics), metrics, weights_auth=auth)
    key = configured_key(settings, "model")
    if key:
        require_bearer(app, key, component="model")
    return app
