"""Container HEALTHCHECK: exit 0 when GET /healthz of the server in this container answers 200.

One image serves every role on a different port, so the port is found at check time: ROLLGATE_PORT,
else `--port` in the command line of PID 1 (the `rollgate serve ...` process), else the role's
default. Standard library only: the slim image has no curl.
"""

from __future__ import annotations

import os
import sys
import urllib.request

DEFAULT_PORTS = {"all": 8000, "gateway": 8000, "agent": 8100, "model": 8200, "resources": 8300, "sandbox": 8400}


def port_from(argv: list[str], env: dict[str, str]) -> int:
    if env.get("ROLLGATE_PORT"):
        return int(env["ROLLGATE_PORT"])
    role = "all"
    for i, arg in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if arg == "--port" and value:
            return int(value)
        if arg.startswith("--port="):
            return int(arg.split("=", 1)[1])
        if arg == "--role" and value:
            role = value
        elif arg.startswith("--role="):
            role = arg.split("=", 1)[1]
    return DEFAULT_PORTS.get(role, 8000)


def pid1_argv() -> list[str]:
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def main() -> int:
    port = port_from(pid1_argv(), dict(os.environ))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as resp:
            return 0 if resp.status == 200 else 1
    except OSError as exc:  # URLError and HTTPError are OSErrors: not ready, or down
        sys.stderr.write(f"healthz on port {port}: {exc}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
