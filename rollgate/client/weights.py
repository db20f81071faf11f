"""Pushing a trainer's weights to a Rollgate gateway: `POST /v1/weights`, which loads them into
every model replica (rollgate.gateway.weights) and answers per replica.

Two ways, as the route takes them: upload the tensors (safetensors bytes; fine for small models,
nothing shared needed), or save a checkpoint where every model server can read it (a shared disk)
and send its path. `GatewayWeightPusher` is the asynchronous trainer's WeightPusher
(rollgate.trainer_adapters.async_rl): it raises when any replica did not take the update, naming
it, rather than train on while a replica serves an old policy."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx

from rollgate.core.errors import UpstreamError, error_from_body

log = logging.getLogger("rollgate.client.weights")


def safetensors_bytes(model: Any) -> bytes:
    """A model's state dict as safetensors bytes; tensors that share storage (tied weights) are
    sent once, as `save_pretrained` writes them."""
    from safetensors.torch import save

    seen: set[int] = set()
    out = {}
    for name, t in model.state_dict().items():
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        out[name] = t.detach().to("cpu").contiguous()
    return save(out)


class WeightsClient:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 900.0):
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0)
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> WeightsClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def upload(self, tensors: bytes, version: str) -> dict[str, Any]:
        resp = self._http.post(
            "/v1/weights",
            content=tensors,
            params={"version": version},
            headers={"content-type": "application/octet-stream"},
        )
        return self._check(resp)

    def load_path(self, path: str, version: str) -> dict[str, Any]:
        return self._check(self._http.post("/v1/weights", json={"version": version, "path": path}))

    def state(self) -> dict[str, Any]:
        return self._check(self._http.get("/v1/weights"))

    @staticmethod
    def _check(resp: httpx.Response) -> dict[str, Any]:
        try:
            body = resp.json()
        except ValueError:
            body = {"error": {"message": resp.text[:300]}}
        if resp.status_code >= 400:
            raise error_from_body(body, component="gateway", status=resp.status_code)
        return body


class GatewayWeightPusher:
    """After each optimizer step: the trainer's weights to every model replica behind a gateway.
    `checkpoint_dir`: save there (a disk the model servers share) and send the path; otherwise
    upload the tensors."""

    def __init__(self, gateway_url: str, *, api_key: str | None = None, checkpoint_dir: str | Path | None = None):
        self.client = WeightsClient(gateway_url, api_key=api_key)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None

    def push(self, model: Any, version: str) -> None:
        if self.checkpoint_dir is not None:
            path = self.checkpoint_dir / version
            model.save_pretrained(path)
            body = self.client.load_path(str(path), version)
        else:
            body = self.client.upload(safetensors_bytes(model), version)
        if not body.get("ok", True):  # a 200 always means every replica loaded it; be sure
            raise UpstreamError(f"not every model replica loaded {version}: {body}", component="gateway")
        log.info("weights %s: loaded by %d model replicas", version, len(body.get("replicas", [])))

    def close(self) -> None:
        self.client.close()
