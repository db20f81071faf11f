"""A small MCP server written with the official SDK (FastMCP), for the interop tests: a counter
whose total lives in the server process, plus tools that fail in each way a server can.

    python counter_mcp_server.py stdio
    python counter_mcp_server.py http PORT      (streamable HTTP on 127.0.0.1:PORT/mcp)
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("counter", host="127.0.0.1", port=int(sys.argv[2]) if len(sys.argv) > 2 else 8000)
total = 0


@mcp.tool()
def add(amount: int) -> str:
    """Add an amount to the counter."""
    global total
    total += amount
    return f"total={total}"


@mcp.tool()
def read_total() -> str:
    """Read the counter."""
    return str(total)


@mcp.tool()
def refuse() -> str:
    """A tool that fails: the model reads the error."""
    raise ValueError("the counter refuses")


@mcp.tool()
def crash() -> str:
    """The server process dies mid-call."""
    os._exit(3)


@mcp.tool()
def babble() -> str:
    """Garbage on the protocol stream, then silence."""
    sys.stdout.write("this is not JSON-RPC\n")
    sys.stdout.flush()
    time.sleep(60)
    return "late"


if __name__ == "__main__":
    mcp.run("stdio" if sys.argv[1] == "stdio" else "streamable-http")
