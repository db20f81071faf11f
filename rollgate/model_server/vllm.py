"""The vllm backend: upstream vLLM OpenAI servers, spoken to in tokens.

The service builds the prompt ids (token-in/token-out) and this backend sends them as a list of
ints to `/v1/completions`, asking for the sampled tokens' log-probs and ids back
(`return_token_ids`; older vLLM: `return_tokens_as_token_ids`), so nothing is re-tokenized.
Replicas are chosen by a hash of the session key; a replica that cannot be reached or answers
5xx is marked down and the next one is tried, within the configured timeout overall.

vLLM reports log-probs of the unscaled model distribution unless the server runs with
`--logprobs-mode processed_logprobs`; start it that way to get temperature-scaled log-probs.

Structured output (`text.format` and its equivalents) is handed to vLLM's structured outputs in
the request (`structured_outputs: {"json": schema}` or `{"json_object": true}`, vLLM >= 0.12), so
vLLM's grammar backend enforces it; the schema keywords it supports are vLLM's. A forced
`tool_choice` is decoded the same way (see `_forced_call`), and the service parses the text with
the same tool-call format as for the local backend."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from rollgate.core.errors import ProtocolError, RollgateError, UpstreamError, UpstreamTimeout
from rollgate.model_server.backend import CallContext, SamplingParams
from rollgate.model_server.output import Generation
from rollgate.model_server.router import ReplicaRouter
from rollgate.model_server.structured import JsonFormat
from rollgate.model_server.weights import NotSupported

log = logging.getLogger("rollgate.model_server.vllm")

# Drops every cached block, running requests' too (vLLM preempts and recomputes them)
RESET_PREFIX_CACHE = "/reset_prefix_cache?reset_running_requests=true"


class VllmBackend:
    name = "vllm"

    def __init__(
        self,
        urls: list[str],
        tokenizer,
        *,
        model: str,
        timeout_s: float = 120.0,
        health_interval_s: float = 5.0,
        api_key: str | None = None,
        max_context: int | None = None,
        weight_version: str | None = None,
    ):
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self.router = ReplicaRouter(urls, timeout_s=timeout_s, health_interval_s=health_interval_s, headers=headers)
        self.tokenizer = tokenizer
        self.model = model
        self.timeout_s = timeout_s
        self.max_context = max_context
        self.weight_version = weight_version

    def ready(self) -> bool:
        return bool(self.router.live())

    def _body(self, prompt_ids: list[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt_ids,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.ignore_eos:
            body["ignore_eos"] = True  # vLLM's own sampling extension
        if params.json_format is not None:
            body["structured_outputs"] = params.json_format.vllm()
        return body

    def check_format(self, fmt: JsonFormat) -> None:
        """vLLM compiles schemas itself: what it cannot enforce comes back as its 400."""

    async def generate(self, prompt_ids: list[int] | None, params: SamplingParams, ctx: CallContext) -> Generation:
        """A turn carries the weight version served when its request was sent: a reload that
        lands while it is generated (asynchronous RL pushes while rollouts run) makes its later
        tokens newer, never older, so the label is the oldest policy that produced any of it."""
        assert prompt_ids is not None, "the vllm backend needs prompt token ids"
        version = self.weight_version
        if params.tool_call is not None:
            gen = await self._forced_call(prompt_ids, params, ctx)
        else:
            gen = await self._complete(prompt_ids, params, ctx)
        return dataclasses.replace(gen, weight_version=version)

    async def _forced_call(self, prompt_ids: list[int], params: SamplingParams, ctx: CallContext) -> Generation:
        """A forced tool call, the way the local backend decodes it: the format's prefix ids are
        appended to the prompt, vLLM samples the call's JSON document under its structured output,
        and the suffix ids and end of turn follow. The forced tokens were the only ones allowed, so
        their log-probs are 0; the ids are the sequence a single constrained decode would give."""
        tc = params.tool_call
        assert tc is not None
        head, tail = list(tc.prefix_ids), [*tc.suffix_ids, self.tokenizer.eos_token_id]
        room = max(1, params.max_tokens - len(head) - len(tail))
        inner = dataclasses.replace(params, max_tokens=room, json_format=tc.body, tool_call=None)
        gen = await self._complete(prompt_ids + head, inner, ctx)
        doc, lps = list(gen.token_ids or []), list(gen.log_probs or [])
        finish = gen.finish_reason
        if finish == "stop" and doc and doc[-1] == self.tokenizer.eos_token_id:
            doc, lps = doc[:-1], lps[:-1]  # the document is whole: the format's suffix ends the turn
            ids, lps = head + doc + tail, [0.0] * len(head) + lps + [0.0] * len(tail)
        else:  # cut at max tokens: no suffix
            ids, lps = head + doc, [0.0] * len(head) + lps
        text_ids = ids[:-1] if ids and ids[-1] == self.tokenizer.eos_token_id else ids
        return Generation(
            text=self.tokenizer.decode(text_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False),
            finish_reason=finish,
            prompt_ids=list(prompt_ids),
            token_ids=ids,
            log_probs=lps,
        )

    async def _complete(self, prompt_ids: list[int], params: SamplingParams, ctx: CallContext) -> Generation:
        self.router.start_health_checks()
        deadline = time.monotonic() + self.timeout_s
        last: Exception | None = None
        for url in self.router.order(ctx.session_key or ""):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                body = await self.router.clients[url].request(
                    "POST", "/v1/completions", self._body(prompt_ids, params), timeout_s=left
                )
            except UpstreamTimeout as exc:
                last = exc
                self.router.mark_down(url)
                continue
            except UpstreamError as exc:
                if not exc.transient:  # a 4xx: the request is at fault, another replica would say the same
                    raise
                last = exc
                self.router.mark_down(url)
                continue
            self.router.mark_up(url)
            return self._generation(body, prompt_ids)
        if isinstance(last, UpstreamTimeout) or last is None:
            raise UpstreamTimeout(f"no vLLM replica answered within {self.timeout_s:g}s", component="model")
        raise UpstreamError(f"every vLLM replica failed; last error: {last}", component="model", transient=True)

    def _generation(self, body: Any, prompt_ids: list[int]) -> Generation:
        try:
            choice = body["choices"][0]
            lp = choice.get("logprobs") or {}
            ids = choice.get("token_ids")
            if ids is None:  # older vLLM: tokens come back as "token_id:123"
                ids = [int(t.split(":", 1)[1]) for t in lp["tokens"]]
            log_probs = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(
                f"vLLM completion lacks token ids or log-probs ({exc!r}); needs vLLM >= 0.10.2", component="model"
            ) from None
        if len(log_probs) != len(ids):
            raise ProtocolError(f"vLLM returned {len(ids)} tokens but {len(log_probs)} log-probs", component="model")
        eos = self.tokenizer.eos_token_id
        text_ids = ids[:-1] if ids and ids[-1] == eos else ids
        text = self.tokenizer.decode(text_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return Generation(
            text=text,
            finish_reason=finish,
            prompt_ids=list(prompt_ids),
            token_ids=list(ids),
            log_probs=log_probs,
        )

    async def reload_weights(self, path: str, version: str) -> None:
        """POST /v1/weights with a path: each upstream loads the checkpoint itself, in place
        (`POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": ...}}`), then
        drops its prefix cache, running requests' blocks included (`POST /reset_prefix_cache`: keys
        and values the old weights computed must not serve the new ones). Both routes are vLLM's
        development mode (VLLM_SERVER_DEV_MODE=1). The version changes only when every upstream
        has reloaded; one that keeps its cache (`{"success": false}`) counts as failed."""
        failed: list[str] = []
        for url in self.router.urls:
            client = self.router.clients[url]
            try:
                await client.request(
                    "POST",
                    "/collective_rpc",
                    {"method": "reload_weights", "kwargs": {"weights_path": path}},
                    timeout_s=max(self.timeout_s, 600.0),
                )
                # Requests may be running (asynchronous RL pushes while rollouts are collected):
                # without reset_running_requests vLLM keeps the blocks they hold, and answers
                # {"success": false}, so prompts sharing their prefix would be served keys and
                # values the old weights computed. With it, vLLM preempts them and recomputes
                # their tokens under the new weights.
                answer = await client.request("POST", RESET_PREFIX_CACHE, None, timeout_s=max(self.timeout_s, 60.0))
                if isinstance(answer, dict) and answer.get("success") is False:
                    raise UpstreamError("it reloaded but did not drop its prefix cache", component="model")
            except RollgateError as exc:
                status = getattr(exc, "upstream_status", None) or exc.status
                if status in (404, 405):
                    raise NotSupported(
                        f"the vLLM server at {url} has no POST /collective_rpc or /reset_prefix_cache: start it "
                        "with VLLM_SERVER_DEV_MODE=1 (vLLM's development routes; in-place reload from a path)",
                        component="model",
                        field="backend",
                    ) from None
                failed.append(f"{url}: {exc.message}")
        if failed:
            raise UpstreamError(
                f"{len(failed)} of {len(self.router.urls)} vLLM servers did not reload {path!r} (the version stays "
                f"{self.weight_version!r}; those that did serve the new weights): " + "; ".join(failed),
                component="model",
            )
        self.weight_version = version

    async def aclose(self) -> None:
        await self.router.aclose()
