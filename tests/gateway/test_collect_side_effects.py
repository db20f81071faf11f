"""`rollgate collect` leaves no trace outside its own work: the caller's settings stay as they
were, the embedded stack serves the socket it bound (no bind-close-rebind gap another process could
slip into), and logging is what `--log-level` says. Real embedded stack, scripted model backend."""

from __future__ import annotations

import argparse
import errno
import logging
import socket

import httpx
import pytest

from rollgate.cli import main
from rollgate.commands.collect import gateway_url
from rollgate.core.serving import listening_socket
from rollgate.core.settings import Settings


def test_the_embedded_stack_leaves_the_callers_settings_alone_and_holds_its_port():
    settings = Settings(model={"backend": "scripted"}, envs=["math"], gateway={"ui": False})
    before = settings.model_dump()
    with gateway_url(argparse.Namespace(gateway=None, concurrency=3), settings) as url:
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
        port = int(url.rsplit(":", 1)[1])
        with socket.socket() as other, pytest.raises(OSError) as info:
            other.bind(("127.0.0.1", port))  # the server holds its port for as long as it serves
        assert info.value.errno == errno.EADDRINUSE
    assert settings.model_dump() == before  # port, host and agent.concurrency included


def test_a_listening_socket_keeps_its_port_from_the_start():
    with listening_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        assert port != 0
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))


@pytest.mark.parametrize("given,level", [(None, logging.WARNING), ("INFO", logging.INFO), ("debug", logging.DEBUG)])
def test_log_level_is_what_the_flag_says(tmp_path, given, level):
    flag = ["--log-level", given] if given else []
    root = logging.getLogger()
    saved = root.level, root.handlers[:]
    try:
        # a missing task file ends the command right after logging is set up
        code = main(["collect", "--tasks", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o.jsonl"), *flag])
        assert code == 2 and root.level == level
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]


def test_an_unknown_log_level_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["collect", "--tasks", "t.jsonl", "--out", "o.jsonl", "--log-level", "LOUD"])
    assert info.value.code == 2 and "--log-level" in capsys.readouterr().err


def test_collect_warns_when_rows_name_an_environment_other_than_env(tmp_path, capsys):
    """`--env` is the environment of rows that name none; rows naming their own keep it, and the
    user who expected --env to apply to every row is told so before anything runs."""
    import json

    from rollgate.cli import main

    tasks = tmp_path / "tasks.jsonl"
    rows = [
        {"responses_create_params": {"input": "2+2?"}, "expected_answer": "4"},
        {"responses_create_params": {"input": "guess"}, "env": "wordle", "secret": "crane"},
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # an unreachable gateway ends the run right after the warning: nothing is collected
    rc = main(["collect", "--tasks", str(tasks), "--out", str(tmp_path / "o.jsonl"), "--env", "math",
               "--gateway", "http://127.0.0.1:9", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc != 0
    assert "1 row(s) name an environment of their own (line 2: 'wordle'); --env math applies only" in err
