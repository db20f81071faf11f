"""Rollout jobs: the queue protocol, its memory and Redis Streams implementations, job planning
and the worker that runs a job's tasks through the agent."""

from __future__ import annotations

from rollgate.core.settings import Settings
from rollgate.jobs.queue import JobQueue


def make_queue(settings: Settings) -> JobQueue:
    """Redis Streams when a Redis URL is set (the distributed shape), else in memory."""
    g = settings.gateway
    if settings.redis_url:
        from rollgate.jobs.redis import RedisJobQueue

        return RedisJobQueue(
            settings.redis_url,
            prefix=g.queue_prefix,
            max_queued_tasks=g.max_queued_tasks,
            visibility_timeout_s=g.visibility_timeout_s,
            result_ttl_s=g.result_ttl_s,
        )
    from rollgate.jobs.memory import MemoryJobQueue

    return MemoryJobQueue(max_queued_tasks=g.max_queued_tasks, visibility_timeout_s=g.visibility_timeout_s)
