"""Black-box harness episodes: a harness runs as a subprocess per episode, its model calls are
captured and assembled into one Trajectory, which is verified; every way a harness can fail is a
typed record, and nothing it started, no session and no file outlives its episode.

Real parts: the embedded app served over HTTP on loopback, a job submitted to its gateway route,
the worker running it with the job's agent, the `math` environment over MCP. The model is the
scripted backend (an instant deterministic policy with the tiny model's real tokenizer and
template: first it calls the first tool, then it answers "done"), so these tests stay fast; the
real tiny model with a third-party harness is tests/agent/test_harness_smolagents.py. The
harnesses are small Python programs written here, speaking Chat Completions with httpx and MCP
(JSON-RPC over HTTP) as any harness would."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
import yaml

from rollgate.core import jsonutil
from rollgate.core.schemas import ErrorKind, Outcome, Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.core.tokens import segments
from tests.agent.harness_checks import chat_loop, process_gone
from tests.conftest import free_port
from tests.gateway.rows import REPO, example_rows

# A harness: chat with the model, run its tool calls over MCP, print the last answer. It leaves
# a note of its pid, working directory and sessions, and may start a child or sleep on request.
HARNESS = textwrap.dedent(
    """
    import json, os, subprocess, sys, time

    note, mode = sys.argv[1], sys.argv[2]
    sleeps = mode.endswith("sleep")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) if sleeps else None
    daemons = []
    if mode.startswith("daemons"):  # leave the session as mini-swe-agent's commands do, and daemonize
        out = subprocess.run(["sh", "-c", "setsid nohup sleep 300 >/dev/null 2>&1 & echo $!"],
                             start_new_session=True, capture_output=True, text=True)
        daemons.append(int(out.stdout))
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                os.close(w)
                time.sleep(300)
            os._exit(0)
        os.close(w)
        daemons.append(int(os.read(r, 32)))
    with open(note + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "child": child.pid if child else None, "daemons": daemons,
                   "cwd": os.getcwd(), "session": os.environ["ROLLGATE_SESSION_ID"],
                   "episode": os.environ["ROLLGATE_EPISODE"], "home": os.environ["HOME"]}, f)
    os.rename(note + ".tmp", note)
    if sleeps:
        time.sleep(120)
    """
) + chat_loop(6, 30)
# Stands in for mini-swe-agent's `mini` CLI (not installed in the default tier: 709 MB with litellm)
# as docs/agents.md runs it: one model call at the api_base of its `-c` override, then the submit
# command run in a session of its own, and the submission written to the `-o` trajectory file.
FAKE_MINI = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import httpx

    args = sys.argv[1:]
    value = lambda flag: args[args.index(flag) + 1]
    base = next(a.split("=", 1)[1] for a in args if a.startswith("model.model_kwargs.api_base="))
    assert value("-c") == "mini.yaml" and "-y" in args and "--exit-immediately" in args
    print("Loading agent config from 'mini.yaml'")
    body = {"model": value("-m").removeprefix("openai/"), "max_tokens": 16,
            "messages": [{"role": "user", "content": value("-t")}]}
    auth = {"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    httpx.post(base + "/chat/completions", json=body, headers=auth, timeout=60).raise_for_status()
    answer = os.environ.get("FAKE_MINI_ANSWER", "42")
    out = subprocess.run(["sh", "-c", f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo {answer}"],
                         capture_output=True, text=True, start_new_session=True).stdout
    lines = out.splitlines(keepends=True)
    assert lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    with open(value("-o"), "w") as f:
        json.dump({"info": {"exit_status": "Submitted", "submission": "".join(lines[1:])}, "messages": []}, f)
    print("Saved trajectory to", value("-o"))
    """
)
QUITS = "import sys\nsys.stderr.write('usage: quits --model M\\nquits: error: unknown flag --x\\n')\nsys.exit(3)\n"
FLOODS = "import sys\nsys.stderr.write('starting\\n')\nwhile True:\n    sys.stderr.write('x' * 65536)\n"


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("harnesses")
    for name, code in (("harness.py", HARNESS), ("quits.py", QUITS), ("floods.py", FLOODS)):
        (d / name).write_text(code)
    mini = d / "mini"
    mini.write_text(f"#!{sys.executable}\n{FAKE_MINI}")
    mini.chmod(0o755)
    return d


def docs_mini_entry(mini: Path) -> dict:
    """docs/agents.md's mini-swe-agent entry, as written there, with `mini` pointing at the fake."""
    text = (REPO / "docs" / "agents.md").read_text()
    section = text[text.index("### Example: mini-swe-agent") :]
    block = section[section.index("```yaml") + len("```yaml") : section.index("```", section.index("```yaml") + 7)]
    [entry] = yaml.safe_load(block)["agents"]
    entry["env"]["MINI"] = str(mini)
    return entry


def entry(name: str, script: Path, *args: str, **options) -> dict:
    return {"name": name, "kind": "harness", "command": [sys.executable, str(script), *args], **options}


@pytest.fixture(scope="module")
def stack(tiny_model_dir, harness_dir):
    """The embedded app with the scripted model, `math`, and one configured harness per case."""
    from rollgate.stack.embedded import build_app

    h = harness_dir / "harness.py"
    note = str(harness_dir / "note-{episode}.json")
    agents = [
        entry("tiny", h, note, "chat", max_calls=6, timeout_s=60, answer="stdout", answer_pattern=r"^ANSWER: (.*)$"),
        entry("one-call", h, note, "chat", max_calls=1, timeout_s=60),
        entry("sleeper", h, note, "sleep", timeout_s=3),  # room to start and note its pids on a loaded machine
        entry("long-sleeper", h, note, "sleep", timeout_s=120),
        entry("daemons", h, note, "daemons", max_calls=6, timeout_s=60),
        entry("daemons-sleeper", h, note, "daemons-sleep", timeout_s=120),
        entry("quits", harness_dir / "quits.py"),
        entry("floods", harness_dir / "floods.py", flood_bytes=1024 * 1024, timeout_s=60),
        {"name": "missing", "kind": "harness", "command": ["rollgate-test-no-such-harness", "{prompt}"]},
        docs_mini_entry(harness_dir / "mini"),
        {**docs_mini_entry(harness_dir / "mini"), "name": "mini-wrong"},
    ]
    agents[-1]["env"]["FAKE_MINI_ANSWER"] = "41"
    port = free_port()
    settings = Settings(
        model={"backend": "scripted", "model_path": tiny_model_dir},
        envs=["math"],
        port=port,
        # workers learn of a cancelled job at their heartbeat: every visibility_timeout_s / 3
        gateway={"ui": False, "visibility_timeout_s": 6},
        agents=agents,
    )
    app = build_app(settings)
    with serve_in_thread(app, port=port, timeout_s=120) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client, app


def run_job(client: httpx.Client, agent: str, n: int = 1) -> list[dict]:
    resp = client.post("/v1/rollouts", json={"tasks": example_rows("math", n), "agent": agent})
    assert resp.status_code == 201, resp.text
    job = resp.json()["job_id"]
    lines = client.get(f"/v1/rollouts/{job}/results", params={"wait": "true"}).iter_lines()
    records = [r["record"] for r in map(jsonutil.loads, lines) if "record" in r]
    assert client.get(f"/v1/rollouts/{job}").json()["agent"] == agent
    return records


def note_of(harness_dir: Path, traj: Trajectory) -> dict:
    episode = "harness-" + traj.trajectory_id.removeprefix("traj_")
    return json.loads((harness_dir / f"note-{episode}.json").read_text())


def left_behind(client: httpx.Client, app, note: dict) -> list[str]:
    """What an episode left behind: processes, its directory, its sessions."""
    pids = [note["pid"], note["child"], *note["daemons"]]
    left = [f"process {pid}" for pid in filter(None, pids) if not process_gone(pid)]
    if Path(note["cwd"]).exists():
        left.append("the episode's directory")
    if client.post(f"/envs/math/sessions/{note['session']}/verify", json={"response": "x"}).status_code != 404:
        left.append("the environment session")
    if client.get(f"/v1/captures/{note['episode']}").status_code != 404 or len(app.state.service.captures):
        left.append("the capture session")
    return left


def assert_nothing_left(client: httpx.Client, app, note: dict) -> None:
    assert left_behind(client, app, note) == []


def test_a_harness_episode_is_captured_token_exact_and_verified(stack, harness_dir):
    client, app = stack
    [record] = run_job(client, "tiny")
    traj = Trajectory.model_validate(record)
    assert traj.outcome is Outcome.completed and traj.reward is not None, traj.error
    # two calls (the tool call, then the answer), the second anchored on the first's exact ids
    assert len(traj.turns) == 2 and not traj.segmented
    segments(traj.turns)  # one growing sequence: raises if any prompt does not extend the one before
    assert all(len(t.generation_token_ids) == len(t.generation_log_probs) > 0 for t in traj.turns)
    assert traj.metrics["model_calls"] == 2 and traj.metrics["segments"] == 1 and traj.metrics["exit_code"] == 0
    kinds = [m.get("type") for m in traj.messages]
    assert "function_call" in kinds and traj.messages[-1]["content"][0]["text"] == "done"
    note = note_of(harness_dir, traj)
    assert note["home"] == note["cwd"]  # HOME is the episode's own directory
    assert_nothing_left(client, app, note)


def test_the_call_budget_truncates_and_still_verifies(stack, harness_dir):
    client, app = stack
    [record] = run_job(client, "one-call")
    traj = Trajectory.model_validate(record)
    assert traj.outcome is Outcome.truncated and traj.reward is not None
    assert len(traj.turns) == 1 and traj.metrics["stopped_by"] == "calls"
    assert traj.metrics["calls_over_budget"] == 1
    assert_nothing_left(client, app, note_of(harness_dir, traj))


def test_the_wall_clock_kills_the_whole_process_group(stack, harness_dir):
    client, app = stack
    [record] = run_job(client, "sleeper")
    traj = Trajectory.model_validate(record)
    assert traj.outcome is Outcome.timeout and traj.reward is None
    assert traj.error.kind is ErrorKind.timeout and traj.error.component == "harness:sleeper"
    note = note_of(harness_dir, traj)
    assert note["child"] is not None
    assert_nothing_left(client, app, note)  # the harness and the child it started are gone


@pytest.mark.parametrize(("agent", "reward"), [("mini", 1.0), ("mini-wrong", 0.0)])
def test_the_documented_mini_swe_agent_entry_hands_its_submission_to_the_verifier(stack, agent, reward):
    client, _ = stack
    row = {"responses_create_params": {"input": "What is 6*7?"}, "env": "math", "expected_answer": "42"}
    resp = client.post("/v1/rollouts", json={"tasks": [row], "agent": agent})
    assert resp.status_code == 201, resp.text
    lines = client.get(f"/v1/rollouts/{resp.json()['job_id']}/results", params={"wait": "true"}).iter_lines()
    [record] = [r["record"] for r in map(jsonutil.loads, lines) if "record" in r]
    traj = Trajectory.model_validate(record)
    assert traj.outcome is Outcome.completed, traj.error
    assert traj.metrics["model_calls"] == 1 and traj.reward == reward  # the submission, not the last message


def test_daemons_a_harness_started_end_with_its_episode(stack, harness_dir):
    client, app = stack
    [record] = run_job(client, "daemons")
    traj = Trajectory.model_validate(record)
    assert traj.outcome is Outcome.completed, traj.error
    note = note_of(harness_dir, traj)
    assert len(note["daemons"]) == 2  # a `setsid nohup ... &` child and a double-forked daemon
    assert_nothing_left(client, app, note)


@pytest.mark.parametrize("agent", ["long-sleeper", "daemons-sleeper"])
def test_cancelling_the_job_kills_the_harness_and_cleans_up(stack, harness_dir, agent):
    client, app = stack
    before = set(harness_dir.glob("note-*.json"))
    job = client.post("/v1/rollouts", json={"tasks": example_rows("math", 1), "agent": agent}).json()["job_id"]
    deadline = time.monotonic() + 60
    while not set(harness_dir.glob("note-*.json")) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    [path] = set(harness_dir.glob("note-*.json")) - before
    note = json.loads(path.read_text())
    assert client.delete(f"/v1/rollouts/{job}").json()["state"] == "cancelled"
    while left_behind(client, app, note) and time.monotonic() < deadline:  # the worker learns of it
        time.sleep(0.1)
    assert_nothing_left(client, app, note)


def test_a_cancelled_episode_stops_its_harness_and_daemons_within_a_second(stack, harness_dir):
    """From the episode's cancel event (what the worker sets when it learns of a cancelled job) to
    nothing of the harness alive, a `setsid nohup` child and a double-forked daemon included."""
    client, app = stack
    before = set(harness_dir.glob("note-*.json"))
    job = client.post("/v1/rollouts", json={"tasks": example_rows("math", 1), "agent": "daemons-sleeper"})
    deadline = time.monotonic() + 60
    while not set(harness_dir.glob("note-*.json")) - before and time.monotonic() < deadline:
        time.sleep(0.02)
    [path] = set(harness_dir.glob("note-*.json")) - before
    note = json.loads(path.read_text())
    [(_, cancel, task)] = app.state.worker._inflight.values()  # noqa: SLF001 - the episode's own event
    started = time.monotonic()
    task.get_loop().call_soon_threadsafe(cancel.set)
    pids = [note["pid"], note["child"], *note["daemons"]]
    while any(not process_gone(p) for p in pids) and time.monotonic() - started < 10:
        time.sleep(0.01)
    took = time.monotonic() - started
    assert [p for p in pids if not process_gone(p)] == [] and took < 1.0, f"{took:.2f}s"
    lines = client.get(f"/v1/rollouts/{job.json()['job_id']}/results", params={"wait": "true"}).iter_lines()
    [record] = [r["record"] for r in map(jsonutil.loads, lines) if "record" in r]
    assert Trajectory.model_validate(record).outcome is Outcome.cancelled
    assert_nothing_left(client, app, note)


@pytest.mark.parametrize(
    ("agent", "kind", "says"),
    [
        ("missing", ErrorKind.not_found, "command 'rollgate-test-no-such-harness' not found"),
        ("quits", ErrorKind.upstream, "exited at once (exit code 3"),
        ("floods", ErrorKind.protocol, "flooded its output"),
    ],
)
def test_a_broken_harness_is_an_env_error_naming_it_and_the_job_goes_on(stack, agent, kind, says):
    client, app = stack
    records = run_job(client, agent, n=2)
    assert len(records) == 2  # one record per task, each episode failing on its own
    for record in records:
        traj = Trajectory.model_validate(record)
        assert traj.outcome is Outcome.env_error and traj.reward is None
        assert traj.error.kind is kind and says in traj.error.message
        assert traj.error.message.startswith(f"harness '{traj.error.component.removeprefix('harness:')}'")
    if agent == "quits":  # the first lines of its stderr
        assert "stderr: usage: quits --model M\nquits: error: unknown flag --x" in traj.error.message
    if agent == "floods":
        assert "stderr: starting" in traj.error.message and len(traj.error.message) < 2500
    assert len(app.state.service.captures) == 0
    assert len(app.state.runtimes["math"].store._data) == 0  # noqa: SLF001 - no session left


def test_agents_are_listed_and_an_unknown_agent_is_a_400_naming_them(stack):
    client, _ = stack
    listed = {a["name"]: a for a in client.get("/v1/agents").json()["agents"]}
    assert {"rollgate", "smolagents", "tiny", "missing"} <= set(listed)
    assert listed["harness"]["available"] is False and "command" in listed["harness"]["reason"]
    resp = client.post("/v1/rollouts", json={"tasks": example_rows("math", 1), "agent": "nope"})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["field"] == "agent" and "'nope'" in err["message"]
    assert "rollgate" in err["message"] and "smolagents" in err["message"] and "tiny" in err["message"]
    # the kind itself needs a command: not something a job can name as is
    resp = client.post("/v1/rollouts", json={"tasks": example_rows("math", 1), "agent": "harness"})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "agent"


def test_the_default_agent_is_the_shipped_loop(stack):
    client, _ = stack
    [record] = run_job(client, "rollgate")
    traj = Trajectory.model_validate(record)
    assert traj.ok and "harness" not in traj.metrics and traj.metrics["tool_calls"] == 1


def test_a_job_sampling_override_is_refused_by_a_harness_not_ignored(stack):
    client, _ = stack
    body = {"tasks": example_rows("math", 1), "agent": "tiny", "sampling": {"temperature": 0.5}}
    job = client.post("/v1/rollouts", json=body).json()["job_id"]
    lines = client.get(f"/v1/rollouts/{job}/results", params={"wait": "true"}).iter_lines()
    [record] = [r["record"] for r in map(jsonutil.loads, lines) if "record" in r]
    assert "outcome" not in record and record["error"]["field"] == "sampling"
    assert "temperature" in record["error"]["message"]
