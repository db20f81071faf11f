"""A small client of the gateway's rollout API (what `rollgate collect` uses; trainers may too).

`results()` follows the NDJSON stream with its cursor and reconnects after a dropped connection,
so every record is yielded exactly once even across disconnects."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx

from rollgate.core import jsonutil
from rollgate.core.errors import CapacityError, RollgateError, UpstreamError, error_from_body
from rollgate.core.retry import RetryPolicy

log = logging.getLogger("rollgate.client")


class RolloutClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_reconnects: int = 20,
        capacity_wait_s: float = 600.0,
    ):
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0)
        )
        self.max_reconnects = max_reconnects
        # Waits of 0.4 s doubling to 5 s; reset by every line received, so a long job survives
        # any number of separate drops (the shared schedule: rollgate.core.retry)
        self._reconnect = RetryPolicy(max_reconnects + 1, 0.4, 5.0, jitter=0.5)
        self.capacity_wait_s = capacity_wait_s

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RolloutClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self, resp: httpx.Response) -> Any:
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = resp.text
            err = error_from_body(body, component="gateway", status=resp.status_code)
            if isinstance(err, CapacityError):
                err.retry_after_s = float(resp.headers.get("retry-after", 1))
            raise err
        return resp.json() if resp.content else None

    def _request(self, method: str, path: str, **kw) -> Any:
        try:
            return self._check(self._http.request(method, path, **kw))
        except httpx.TransportError as exc:
            hint = ""
            if isinstance(exc, httpx.ConnectError):  # nothing listens there: say how to start one
                port = self._http.base_url.port
                serve = f"rollgate serve --port {port}" if port else "rollgate serve"
                hint = f"; is a gateway running? start one with `{serve}`, or leave out --gateway to run in process"
            raise UpstreamError(
                f"cannot reach the gateway at {self.base_url}: {exc}{hint}", component="gateway", transient=True
            ) from None

    def envs(self) -> list[str]:
        return list(self._request("GET", "/v1/envs")["envs"])

    def env_roles(self, env: str) -> list[str]:
        """The roles of a multi-role environment ([] for a single-role one: its GET /roles is a 404)."""
        from rollgate.core.errors import NotFound

        try:
            return list(self._request("GET", f"/envs/{env}/roles")["roles"])
        except NotFound:
            return []

    def submit(
        self,
        tasks: list[dict[str, Any]],
        *,
        env: str | None = None,
        repeats: int = 1,
        sampling: dict[str, Any] | None = None,
        policy_version: str | None = None,
        purpose: str | None = None,
        retry_errors: int | None = None,
        priority: int | None = None,
        agent: str | None = None,
        roles: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Submit a job; while the queue is full (503) wait as told by Retry-After, up to capacity_wait_s.
        `purpose="eval"` marks an evaluation job (the gateway reports it per policy version);
        `retry_errors` re-runs infrastructure failures (default: the gateway's setting) and
        `priority` weights the job's share of the workers and `agent` picks the agent that runs the
        episodes (default: the shipped loop; docs/agents.md). `roles` maps each role of a multi-role
        environment to its policy (docs/roles.md)."""
        body = {
            "tasks": tasks,
            "env": env,
            "repeats": repeats,
            "sampling": sampling or {},
            "policy_version": policy_version,
        }
        extras = (
            ("purpose", purpose),
            ("retry_errors", retry_errors),
            ("priority", priority),
            ("agent", agent),
            ("roles", roles),
        )
        for key, value in extras:
            if value is not None:
                body[key] = value
        deadline = time.monotonic() + self.capacity_wait_s
        while True:
            try:
                return self._request(
                    "POST", "/v1/rollouts", content=jsonutil.dumps(body), headers={"content-type": "application/json"}
                )
            except CapacityError as exc:
                if time.monotonic() + exc.retry_after_s > deadline:
                    raise
                log.info("gateway queue is full; retrying in %.0fs", exc.retry_after_s)
                time.sleep(exc.retry_after_s)

    def progress(self, job_id: str) -> dict[str, Any]:
        return self._request("GET", f"/v1/rollouts/{job_id}")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/v1/rollouts/{job_id}")

    def results(self, job_id: str, *, cursor: str | None = None, wait: bool = True) -> Iterator[dict[str, Any]]:
        """Yield the job's result lines ({cursor, type, record}) until its `end` line; reconnect
        from the last cursor after a dropped connection."""
        failures = 0
        while True:
            params = {"wait": "true" if wait else "false"}
            if cursor:
                params["cursor"] = cursor
            try:
                with self._http.stream(
                    "GET", f"/v1/rollouts/{job_id}/results", params=params, timeout=httpx.Timeout(None, connect=10.0)
                ) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        self._check(resp)
                    for raw in resp.iter_lines():
                        if not raw.strip():
                            continue
                        line = jsonutil.loads(raw)
                        cursor = line.get("cursor", cursor)
                        failures = 0
                        if line.get("type") == "heartbeat":
                            continue
                        yield line
                        if line.get("type") == "end":
                            return
                if not wait:
                    return
                # With wait, only the `end` line ends a job's stream: a response that stopped
                # before it (the gateway lost its queue mid-stream) is resumed like a drop.
                raise UpstreamError(f"the results stream of {job_id} ended early", component="gateway", transient=True)
            except (httpx.TransportError, RollgateError) as exc:
                if isinstance(exc, RollgateError) and not (isinstance(exc, UpstreamError) and exc.transient):
                    raise
                failures += 1
                log.warning("results stream of %s broke (%s); resuming from %s", job_id, exc, cursor)
                if not self._reconnect.wait_sync(failures):
                    raise UpstreamError(
                        f"lost the results stream of {job_id} {failures} times: {exc}",
                        component="gateway",
                        transient=True,
                    ) from None
