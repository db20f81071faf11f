"""Real NeMo Gym 0.7.0 resources servers, unmodified, collected through `rollgate collect`
(marker `nemo_gym`: scripts/install-nemo-gym.sh, then `pytest -m nemo_gym tests/interop/test_nemo_gym_real.py`;
ROLLGATE_NEMO_GYM_VENV names another venv than .venv-nemo-gym).

Four servers that need no LLM judge start without Ray, as NeMo Gym's own launcher would start
each one (`gym env resolve`, then `python app.py` in the server's folder), on loopback ports. Their
shipped `data/example.jsonl` rows, steered by the scripted model (a script per row in
`responses_create_params.metadata`), are collected by the `rollgate collect` command with an
`envs` entry of kind `nemo_gym` per server. Every row must give exactly one record, and each
reward must equal what the server's own /verify gives when the same calls are made to it
directly; the direct calls also time the adapter's cost per episode."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from devtools.processes import ServerProcess, rollgate_cmd
from tests.conftest import free_port

pytestmark = [pytest.mark.nemo_gym, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("ROLLGATE_NEMO_GYM_VENV", ROOT / ".venv-nemo-gym"))


def _call(name: str, **arguments) -> dict:
    return {"call": {"name": name, "arguments": arguments}}


# One script per shipped row: even rows play the task right, odd rows wrong, so that equal
# rewards are not equal by accident.
def _weather(row: dict, i: int) -> list[dict]:
    if i % 2:
        return [{"text": "I cannot look that up."}]
    return [_call("get_weather", city="San Francisco"), {"text": "It is cold there."}]


def _counter(row: dict, i: int) -> list[dict]:
    if i % 2:
        return [_call("increment_counter", count=1), {"text": "done"}]
    step = row["expected_count"] - row["initial_count"]
    return [_call("increment_counter", count=step), _call("get_counter_value"), {"text": str(row["expected_count"])}]


def _multireward(row: dict, i: int) -> list[dict]:
    expected = row["expected_call"]
    args = expected["arguments"] if i % 2 == 0 else {"city": "Nowhere"}
    return [_call(expected["name"], **args), {"text": "done"}]


def _synonyms(row: dict, i: int) -> list[dict]:
    values = list(row["expected_synonym_values"]) if i % 2 == 0 else [1, 2]
    calls = [_call("get_synonym_value", synonym=s) for s in row["expected_synonyms"]]
    return [*calls, _call("extract_synonym_values", synonym_values=values), {"text": "done"}]


SERVERS = {
    "example_single_tool_call": _weather,
    "example_session_state_mgmt": _counter,
    "example_tool_call_multireward": _multireward,
    "example_multi_step": _synonyms,
}


def _site_packages() -> Path:
    found = sorted(VENV.glob("lib/python3*/site-packages/resources_servers"))
    if not (VENV / "bin" / "python").exists() or not found:
        pytest.skip(f"NeMo Gym 0.7.0 is not installed in {VENV}: run scripts/install-nemo-gym.sh")
    return found[0].parent


def _resolve(name: str, port: int, scratch: Path, env: dict[str, str]) -> subprocess.Popen:
    """`gym env resolve` of a config naming just this resources server, on a loopback port."""
    config = {name: {"resources_servers": {name: {"entrypoint": "app.py", "domain": "agent"}}}}
    config[name]["resources_servers"][name].update(host="127.0.0.1", port=port)
    path = scratch / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.Popen(
        [str(VENV / "bin" / "gym"), "env", "resolve", "--config", str(path)],
        cwd=scratch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="session")
def nemo_gym_servers():
    """The servers, started once: name -> base URL. Stopped with SIGINT, then their process groups
    are killed and the scratch folder (configs, logs, TMPDIR) removed."""
    site = _site_packages()
    scratch = Path(tempfile.mkdtemp(prefix="rollgate-nemo-gym-"))
    (scratch / "tmp").mkdir()
    # its wandb import leaves folders in TMPDIR, matplotlib a cache: both go to the scratch folder
    env = {**os.environ, "TMPDIR": str(scratch / "tmp"), "MPLCONFIGDIR": str(scratch / "tmp")}
    env.pop("PYTHONPATH", None)
    ports = {name: free_port() for name in SERVERS}
    procs: list[ServerProcess] = []
    try:
        resolving = {name: _resolve(name, ports[name], scratch, env) for name in SERVERS}
        for name, proc in resolving.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"gym env resolve for {name} failed: {err[-2000:]}"
            folder = site / "resources_servers" / name
            server_env = {"NEMO_GYM_CONFIG_DICT": out, "NEMO_GYM_CONFIG_PATH": name, "PYTHONPATH": str(folder)}
            # `cd` then exec: the server runs from its own folder and leads its process group
            args = ["/bin/sh", "-c", 'cd "$1" && exec "$2" app.py', "sh", str(folder), str(VENV / "bin" / "python")]
            procs.append(
                ServerProcess(
                    args,
                    ports[name],
                    name=name,
                    env={**env, **server_env},
                    log_path=scratch / f"{name}.log",
                    health_path="/openapi.json",
                )
            )
        with ThreadPoolExecutor(len(procs)) as pool:  # ~40 s each on 2 cores: start them together
            list(pool.map(lambda p: p.start(timeout_s=600), procs))
        yield {p.name: p.url for p in procs}
    finally:
        for p in procs:
            p.kill(signal.SIGINT, wait_s=30)
            if p.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.proc.pid, signal.SIGKILL)  # anything it started and left behind
        shutil.rmtree(scratch, ignore_errors=True)


def _rows(site: Path) -> list[dict]:
    rows = []
    for name, script in SERVERS.items():
        lines = (site / "resources_servers" / name / "data" / "example.jsonl").read_text().splitlines()
        for i, line in enumerate(x for x in lines if x.strip()):
            row = json.loads(line)
            params = row["responses_create_params"]
            params["metadata"] = {**(params.get("metadata") or {}), "rollgate_script": json.dumps(script(row, i))}
            rows.append({**row, "env": f"ng_{name}", "task_id": f"{name}/{i}"})
    return rows


def _response(row: dict, traj: dict) -> dict:
    """What NeMo Gym's agents send to /verify, built here from the trajectory's transcript."""
    params = row["responses_create_params"]
    n = 1 if isinstance(params["input"], str) else len(params["input"])
    return {
        "id": "resp_direct",
        "object": "response",
        "created_at": int(time.time()),
        "model": "direct",
        "output": traj["messages"][n:],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": params.get("tools", []),
    }


def _direct(client: httpx.Client, row: dict, traj: dict) -> tuple[dict, float]:
    """The episode's calls made straight to the server (the client's cookie jar is the session),
    and /verify's answer for the same response; with the seconds the calls took."""
    client.cookies.clear()
    response = _response(row, traj)
    started = time.perf_counter()
    client.post("/seed_session", json=row).raise_for_status()
    for item in traj["messages"]:
        if item.get("type") == "function_call":
            client.post(f"/{item['name']}", json=json.loads(item["arguments"]))
    answer = client.post("/verify", json={**row, "response": response})
    seconds = time.perf_counter() - started
    answer.raise_for_status()
    return answer.json(), seconds


def test_shipped_rows_collect_through_rollgate_with_the_servers_own_rewards(nemo_gym_servers, tiny_model_dir, tmp_path):
    site = _site_packages()
    rows = _rows(site)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    envs = [{"name": f"ng_{name}", "kind": "nemo_gym", "urls": [url]} for name, url in nemo_gym_servers.items()]
    config = tmp_path / "rollgate.yaml"
    # the scripted model plays no forward pass: example_multi_step's long prompts fit a wide context
    model = {"backend": "scripted", "model_path": tiny_model_dir, "max_context_tokens": 65536}
    agent = {"max_turns": 32, "max_output_tokens": 16384}
    config.write_text(yaml.safe_dump({"envs": envs, "model": model, "agent": agent}))
    out = tmp_path / "out.jsonl"
    # one episode at a time, so that the adapter's timings compare with the direct calls' below
    cmd = rollgate_cmd("collect", "--config", str(config), "--tasks", str(tasks), "--out", str(out))
    done = subprocess.run([*cmd, "--concurrency", "1", "--no-progress"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["task"]["task_id"] for r in records) == sorted(r["task_id"] for r in rows)  # one each
    failures = out.with_name(out.name + ".failures.jsonl")
    assert not failures.exists() or not failures.read_text().strip()
    by_task = {r["task_id"]: r for r in rows}
    adapter_s, direct_s, rewards = [], [], {}
    # one pooled client per server, as the adapter keeps one pool: the comparison is per call
    clients = {name: httpx.Client(base_url=url, timeout=60) for name, url in nemo_gym_servers.items()}
    for rec in records:
        assert rec["outcome"] == "completed", rec.get("error")
        row = {k: v for k, v in by_task[rec["task"]["task_id"]].items() if k != "env"}  # as the adapter sends it
        server = rec["task"]["env"].removeprefix("ng_")
        answer, seconds = _direct(clients[server], row, rec)
        assert rec["reward"] == answer["reward"], (rec["task"]["task_id"], rec["reward"], answer["reward"])
        if "reward_components" in answer:
            assert rec["reward_components"] == answer["reward_components"]
        rewards.setdefault(server, []).append(rec["reward"])
        t = rec["timings"]
        adapter_s.append(t["seed_s"] + t["tools_s"] + t["verify_s"])
        direct_s.append(seconds)
    for client in clients.values():
        client.close()
    for server, got in rewards.items():  # the scripts play some rows right: not all rewards are 0
        assert len(got) == 5 and max(got) > 0 and min(got) < max(got), (server, got)
    added = statistics.mean(adapter_s) - statistics.mean(direct_s)
    print(
        f"\nNeMo Gym adapter: {len(records)} episodes on {len(rewards)} servers; environment time per episode "
        f"{statistics.mean(adapter_s) * 1000:.1f} ms through Rollgate vs {statistics.mean(direct_s) * 1000:.1f} ms "
        f"direct (median {statistics.median(adapter_s) * 1000:.1f} vs {statistics.median(direct_s) * 1000:.1f}): "
        f"{added * 1000:+.1f} ms added by the adapter",
        file=sys.stderr,
    )
