"""A real headless Chromium driven over the DevTools protocol (one websocket, a few commands):
navigate, evaluate JavaScript in the page, wait for a condition, take a screenshot.

Chromium is a system package (Debian: `apt-get install chromium`); tests skip with that hint
where it is absent."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--window-size=1280,900",
    "--remote-debugging-port=0",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self, executable: str):
        self.executable = executable
        self.profile = tempfile.mkdtemp(prefix="rollgate-chromium-")
        self.log_path = Path(self.profile) / "chromium.log"
        self.proc: subprocess.Popen | None = None
        self.ws: Any = None
        self._ids = itertools.count(1)
        self._stack = contextlib.ExitStack()

    def start(self, timeout_s: float = 30.0) -> Browser:
        from websockets.sync.client import connect

        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [self.executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BrowserError(f"chromium did not start: {self.log_path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json() if t["type"] == "page"]
        self.ws = self._stack.enter_context(connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10))
        self.call("Page.enable")
        self.call("Runtime.enable")
        return self

    def call(self, method: str, timeout_s: float = 20.0, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if msg.get("id") == msg_id:  # everything else is an event we do not subscribe to
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                state = self.eval(
                    "document.body ? document.body.dataset.state + ' / ' + "
                    "document.body.innerText.slice(0, 500) : 'no body'"
                )
                raise BrowserError(f"timed out waiting for {expression!r}; page: {state}")
            time.sleep(0.05)

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        self._stack.close()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)
