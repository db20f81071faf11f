"""Checks that a harness episode left nothing behind, and the chat loop of the small harness
programs the harness tests write, shared by them."""

from __future__ import annotations

import os
from pathlib import Path

# The body of a harness program: chat with the model (Chat Completions over httpx, the metadata of
# ROLLGATE_METADATA sent along when there is one), run each tool call over MCP (JSON-RPC over HTTP),
# print the last answer. The program imports json and os first.
_CHAT_LOOP = """
import httpx  # after the program's own start: a loaded machine takes a while to import it

tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                           "parameters": t["parameters"]}}
         for t in json.loads(os.environ["ROLLGATE_TOOLS"])]
messages = [{"role": "user", "content": os.environ["ROLLGATE_PROMPT"]}]
auth = {"authorization": "Bearer " + os.environ["ROLLGATE_API_KEY"]}
metadata = json.loads(os.environ.get("ROLLGATE_METADATA") or "{}")
for step in range(STEPS):
    body = {"model": os.environ["ROLLGATE_MODEL"], "messages": messages, "tools": tools, "max_tokens": 64,
            **({"metadata": metadata} if metadata else {})}
    reply = httpx.post(os.environ["ROLLGATE_BASE_URL"] + "/chat/completions", json=body, headers=auth, timeout=60)
    reply.raise_for_status()
    msg = reply.json()["choices"][0]["message"]
    messages.append({k: v for k, v in msg.items() if k in ("role", "content", "tool_calls") and v})
    if not msg.get("tool_calls"):
        print("ANSWER:", msg.get("content"))
        break
    for call in msg["tool_calls"]:
        rpc = {"jsonrpc": "2.0", "id": step, "method": "tools/call",
               "params": {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}}
        out = httpx.post(os.environ["ROLLGATE_MCP_URL"], json=rpc, timeout=MCP_TIMEOUT,
                         headers={"accept": "application/json, text/event-stream"}).json()
        text = out["result"]["content"][0]["text"]
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
"""


def chat_loop(steps: int, mcp_timeout: float | None) -> str:
    """The harness programs' chat loop: at most `steps` model calls; `mcp_timeout` None waits as long
    as a tool call takes (a role's step-mode call returns once its turn comes back)."""
    return _CHAT_LOOP.replace("STEPS", str(steps)).replace("MCP_TIMEOUT", repr(mcp_timeout))


def process_gone(pid: int) -> bool:
    """No live process has this pid (a zombie waiting for a reaper that is not ours counts as gone:
    it runs nothing and holds nothing but its exit status)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (e.g. an episode's capture session)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and not process_gone(int(entry)):
            found.append(int(entry))
    return found
