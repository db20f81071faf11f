"""`rollgate serve`: the embedded shape (role all, the default) or one part per process."""

from __future__ import annotations

import argparse
import importlib

from rollgate.core.settings import Settings

ROLES = {
    # role -> "module:function(settings[, env_name]) -> ASGI app"
    "all": "rollgate.stack.embedded:build_app",
    "gateway": "rollgate.gateway.server:build_app",
    "agent": "rollgate.stack.agent_role:build_app",
    "model": "rollgate.model_server.server:build_app",
    "resources": "rollgate.resources_servers.server:build_app",
    # runs model-written code for the code environment's `remote` provider (docs/sandbox.md)
    "sandbox": "rollgate.sandbox.service:build_app",
}
DEFAULT_PORTS = {"all": 8000, "gateway": 8000, "agent": 8100, "model": 8200, "resources": 8300, "sandbox": 8400}

SERVE_EPILOG = """\
settings (environment variables; nested fields use __; a YAML file via --config holds the same tree):
  ROLLGATE_API_KEY              bearer token; required by roles gateway and agent (or --no-auth)
  ROLLGATE_REDIS_URL            Redis for sessions and the job queue (roles gateway, agent, resources)
  ROLLGATE_MODEL_URL            model server base URL (roles gateway, agent)
  ROLLGATE_MODEL_URLS           every model server replica, JSON list (gateway: POST /v1/weights reaches each)
  ROLLGATE_ENV_URLS             JSON {"env": ["http://replica:8300", ...]} (roles gateway, agent)
  ROLLGATE_ENVS                 JSON list of environments served in process (role all)
  ROLLGATE_MODEL__BACKEND       local | vllm | openai | scripted (roles all, model)
  ROLLGATE_AGENT__CONCURRENCY   episodes one agent worker runs at once (default 64)
  ROLLGATE_GATEWAY__MAX_QUEUED_TASKS      queued tasks beyond which jobs get 503 + Retry-After
  ROLLGATE_GATEWAY__VISIBILITY_TIMEOUT_S  a dead worker's tasks are re-run after this long
  ROLLGATE_SANDBOX__PROVIDER    local | docker | kubernetes | remote: where the code environment runs code
  ROLLGATE_SANDBOX__URL, ROLLGATE_SANDBOX__TOKEN   provider remote: the sandbox service (role sandbox) and
                                its token (role sandbox: the token it requires)
  ROLLGATE_SANDBOX__ALLOW_UNISOLATED  true: run model code even where it cannot be isolated (default: refuse)
  ROLLGATE_MODEL__MODEL_PATH    model directory of the local backend (default: the tiny model in ROLLGATE_HOME)
  ROLLGATE_MODEL__CHAT_TEMPLATE, ROLLGATE_MODEL__TOOL_CALL_FORMAT, ROLLGATE_MODEL__REASONING_FORMAT
                                how the model talks (--model NAME fills them from the registry)

examples:
  rollgate serve                                   # everything on 127.0.0.1:8000
  rollgate serve --model smollm2-135m-instruct     # a real model (rollgate model list)
  rollgate serve --role model --port 8200
  rollgate serve --role resources --env math --port 8300 --redis-url redis://127.0.0.1:6379/0
  ROLLGATE_API_KEY=... ROLLGATE_MODEL_URL=http://127.0.0.1:8200 \\
    ROLLGATE_ENV_URLS='{"math": ["http://127.0.0.1:8300"]}' \\
    rollgate serve --role agent --port 8100 --redis-url redis://127.0.0.1:6379/0
  (role gateway: the same settings, --port 8000)
"""


def add_model_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        metavar="NAME|DIR",
        help="the model the local backend serves: a registry name (rollgate model list; fetched and converted "
        "once if absent, with its chat template and tool-call format) or a model directory "
        "(default: settings.model.model_path, the tiny model)",
    )


def apply_model_flag(settings: Settings, args: argparse.Namespace, command: str) -> None:
    """--model NAME|DIR into settings.model; a bad value ends the command with the reason."""
    if not getattr(args, "model", None):
        return
    from rollgate.core.errors import RollgateError
    from rollgate.model_server.fetch import use_model

    try:
        use_model(settings, args.model)
    except RollgateError as exc:
        raise SystemExit(f"rollgate {command}: --model {args.model}: {exc}") from None


def add_common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML settings file (also ROLLGATE_CONFIG)")
    p.add_argument(
        "--redis-url",
        metavar="URL",
        help="Redis for sessions and the job queue (distributed shape): redis://HOST:PORT/DB, or "
        "redis+cluster://HOST:PORT[,HOST:PORT...] for a Redis Cluster; default: in-memory",
    )


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--role",
        choices=sorted(ROLES),
        default="all",
        help="all: every part in one process (embedded, default); or one part: gateway, agent, model, resources, "
        "sandbox",
    )
    p.add_argument("--env", metavar="NAME", help="environment to serve (role resources)")
    add_model_flag(p)
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="port (defaults: all/gateway 8000, agent 8100, model 8200, resources 8300)",
    )
    p.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default INFO)")
    p.add_argument("--log-json", action="store_true", default=None, help="structured JSON logs")
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="run roles gateway/agent without a bearer token (they refuse to start without "
        "ROLLGATE_API_KEY otherwise; role all needs no token unless one is set)",
    )
    add_common_flags(p)
    p.epilog = SERVE_EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def build(role: str, settings: Settings, env: str | None):
    module, func = ROLES[role].split(":")
    builder = getattr(importlib.import_module(module), func)
    if role == "resources":
        if not env:
            raise SystemExit("rollgate serve --role resources needs --env NAME")
        return builder(settings, env)
    return builder(settings)


def run(args: argparse.Namespace) -> int:
    from rollgate.core.errors import RollgateError
    from rollgate.core.logging import setup_logging
    from rollgate.core.serving import serve_forever

    settings = Settings.load(
        args.config,
        redis_url=args.redis_url,
        host=args.host,
        port=args.port or None,
        log_level=args.log_level,
        log_json=args.log_json,
    )
    if args.port is None and "port" not in settings.model_fields_set:
        settings.port = DEFAULT_PORTS[args.role]
    if getattr(args, "no_auth", False):
        settings.gateway.auth = False
    setup_logging(settings.log_level, json_logs=settings.log_json)
    if args.role in ("all", "model"):
        apply_model_flag(settings, args, "serve")
    elif args.model:
        raise SystemExit(f"rollgate serve --role {args.role}: --model applies to roles all and model only")
    try:
        app = build(args.role, settings, args.env)
    except RollgateError as exc:  # a refusal to start (e.g. no sandbox isolation): the reason, not a traceback
        raise SystemExit(f"rollgate serve --role {args.role}: {exc}") from None
    serve_forever(app, settings.host, settings.port, log_level=settings.log_level.lower())
    return 0
