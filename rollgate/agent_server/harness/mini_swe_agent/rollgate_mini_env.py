"""mini-swe-agent's environment for a Rollgate episode: every command runs in the episode's sandbox.

mini-swe-agent runs each command its model gives through an environment's `execute`; its
`local` environment runs them on the host. This one sends them to the episode's environment
session instead: the session's `shell` tool over MCP (ROLLGATE_MCP_URL, the session in the URL),
which runs `sh -c` in the session's sandbox (the swe family: the buggy checkout, no network).
What the command leaves in the sandbox's working tree is what the environment verifies.

Loaded by mini-swe-agent itself (`environment.environment_class=rollgate_mini_env.SessionEnvironment`),
in its own virtual environment: standard library and mini-swe-agent only, never Rollgate.

A failed command is the model's business (its output and exit code, as `local` gives them); a
session that cannot be reached or a tool that refuses (its budget spent) raises, so the harness
stops and the episode ends as an infrastructure failure, never as a verified attempt."""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import sys
import urllib.error
import urllib.request
from typing import Any

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TOOL = "shell"
# The shell tool's answer: a status line, then the streams it printed (sandbox ExecResult).
_STATUS = re.compile(r"^exit code (-?\d+)$")
_STDOUT = "--- stdout ---\n"
_STDERR = "\n--- stderr ---\n"


class SessionError(RuntimeError):
    """The episode's session cannot run commands: the harness must stop. The reason is also
    written to stderr at once, so that it heads what the episode's error quotes (mini prints its
    traceback after it)."""

    def __init__(self, message: str):
        super().__init__(message)
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


class SessionEnvironment:
    """mini-swe-agent's Environment protocol (execute, get_template_vars, serialize) over a session."""

    def __init__(
        self,
        *,
        mcp_url: str = "",
        api_key: str = "",
        cwd: str = "",
        env: dict[str, str] | None = None,
        timeout: int = 120,
        **_ignored: Any,  # mini's `local` settings that have no meaning here
    ):
        self.mcp_url = mcp_url or os.environ.get("ROLLGATE_MCP_URL", "")
        if not self.mcp_url:
            raise SessionError("rollgate_mini_env: ROLLGATE_MCP_URL is not set (run mini as a Rollgate agent)")
        self.api_key = api_key or os.environ.get("ROLLGATE_API_KEY", "")
        self.config = {"cwd": cwd, "env": dict(env or {}), "timeout": timeout}
        self._calls = 0

    # --- mini-swe-agent's protocol ---------------------------------------------------------
    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        text = self.call(TOOL, {"command": self.script(command, cwd or self.config["cwd"])}, timeout=timeout)
        output = parse(text)
        self._check_finished(output)
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # the sandbox shares the host's kernel: uname is the same; nothing of the host's environment
        return {**self.config, **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict:
        kind = f"{type(self).__module__}.{type(self).__name__}"
        return {"info": {"config": {"environment": dict(self.config), "environment_type": kind}}}

    # --- the session ------------------------------------------------------------------------
    def script(self, command: str, cwd: str) -> str:
        """The command as the sandbox runs it: stderr into stdout (as `local` merges them),
        mini's environment variables exported, in `cwd` when one is set."""
        lines = ["exec 2>&1"]
        lines += [f"export {k}={shlex.quote(str(v))}" for k, v in self.config["env"].items()]
        if cwd:
            lines.append(f"cd {shlex.quote(cwd)} || exit 1")
        return "\n".join([*lines, command])

    def call(self, name: str, arguments: dict[str, Any], *, timeout: int | None = None) -> str:
        self._calls += 1
        params = {"name": name, "arguments": arguments}
        body = {"jsonrpc": "2.0", "id": self._calls, "method": "tools/call", "params": params}
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.mcp_url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.config["timeout"]) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise SessionError(f"rollgate_mini_env: the session answered {exc.code}: {exc.read()[:300]!r}") from None
        except (OSError, ValueError) as exc:
            raise SessionError(f"rollgate_mini_env: the session cannot be reached: {exc}") from None
        if "error" in answer:
            raise SessionError(f"rollgate_mini_env: {name}: {answer['error'].get('message', answer['error'])}")
        result = answer.get("result") or {}
        text = "".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))
        if result.get("isError"):
            # a tool error of `shell` is never the command's failure (that is an exit code): it is
            # the session refusing (its tool budget spent), so the harness stops here
            raise SessionError(f"rollgate_mini_env: the session refused {name!r}: {text[:500]}")
        return text

    def _check_finished(self, output: dict[str, Any]) -> None:
        """mini-swe-agent's submission rule: a successful command whose output starts with SUBMIT."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT and output["returncode"] == 0:
            from minisweagent.exceptions import Submitted

            submission = "".join(lines[1:])
            raise Submitted(
                {"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}}
            )


def parse(text: str) -> dict[str, Any]:
    """The shell tool's answer -> mini-swe-agent's {output, returncode, exception_info}."""
    status, _, rest = text.partition("\n")
    match = _STATUS.match(status.strip())
    out, _, err = rest.partition(_STDERR) if not rest.startswith(_STDERR.lstrip("\n")) else ("", "", rest)
    out = out.removeprefix(_STDOUT)
    err = err.removeprefix(_STDERR.lstrip("\n"))
    output = out + ("\n" if out and err else "") + err
    if output:
        output += "\n"  # the tool strips the last newline; commands' outputs end with one
    if match is None:  # killed: a wall-clock timeout or a limit
        return {"output": output, "returncode": -1, "exception_info": f"The command was stopped: {status.strip()}"}
    return {"output": output, "returncode": int(match.group(1)), "exception_info": ""}
