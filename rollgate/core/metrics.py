"""Prometheus instruments, one set per process (a `Metrics` object owns its registry; no global
default registry). In the distributed shape every process exports only what it did itself, so
summing over processes never double counts: the gateway counts jobs and queue, agent workers
count rollouts and hops, resources servers count tool calls, model servers count tokens."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

HOP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
REWARD_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class _Off:
    """An instrument that records nothing (see Metrics.off)."""

    def labels(self, *args: object, **kwargs: object) -> _Off:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


class Metrics:
    """Every instrument of a process. Code takes a Metrics and records unconditionally: where
    nothing is exported (a trainer's in-process stack, a test), it gets `Metrics.off()`."""

    _instrument_names: tuple[str, ...] | None = None  # learned once, from one real instance

    @classmethod
    def off(cls) -> Metrics:
        """A null object: the same attributes, each an instrument that records nothing."""
        if cls._instrument_names is None:
            cls._instrument_names = tuple(n for n in vars(cls()) if n != "registry")
        off = cls.__new__(cls)
        off.registry = None
        instrument = _Off()  # stateless: one serves every name
        for name in cls._instrument_names:
            setattr(off, name, instrument)
        return off

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.rollouts_started = Counter("rollgate_rollouts_started", "Episodes started", ["env"], registry=r)
        self.rollouts_finished = Counter(
            "rollgate_rollouts_finished", "Episodes finished, by outcome", ["env", "outcome"], registry=r
        )
        self.in_flight = Gauge("rollgate_sessions_in_flight", "Episodes running now", ["env"], registry=r)
        self.hop_latency = Histogram(
            "rollgate_hop_latency_seconds",
            "Latency of one hop of an episode",
            ["hop", "env"],
            buckets=HOP_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "rollgate_tokens",
            "Tokens seen by the policy (in = prompt, out = generated)",
            ["direction", "env"],
            registry=r,
        )
        self.reward = Histogram(
            "rollgate_reward", "Reward of verified episodes", ["env"], buckets=REWARD_BUCKETS, registry=r
        )
        self.token_drift = Counter(
            "rollgate_token_drift",
            "Turns whose prompt did not extend the previous turn's tokens (re-tokenisation detected)",
            ["env"],
            registry=r,
        )
        self.retries = Counter("rollgate_retries", "Retried transient transport errors", ["component"], registry=r)
        self.queue_depth = Gauge("rollgate_queue_depth", "Tasks waiting in the job queue", registry=r)
        self.queue_reclaims = Counter("rollgate_queue_reclaims", "Tasks reclaimed from dead workers", registry=r)
        self.jobs = Counter("rollgate_jobs", "Rollout jobs by state change", ["event"], registry=r)
        self.tool_calls = Counter(
            "rollgate_tool_calls", "Tool calls served by a resources server", ["env", "tool", "result"], registry=r
        )
        self.sandbox_execs = Counter(
            "rollgate_sandbox_executions", "Sandbox executions by result", ["result"], registry=r
        )
        self.model_requests = Counter(
            "rollgate_model_requests", "Model server requests by backend and status", ["backend", "status"], registry=r
        )
        self.model_tokens = Counter(
            "rollgate_model_tokens", "Tokens processed by the model server", ["direction"], registry=r
        )
        self.model_batch_size = Histogram(
            "rollgate_model_batch_size",
            "Sequences decoded together",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
