"""The results stream of a job: NDJSON, in completion order, resumable by cursor.

Each line is one JSON object:
  {"cursor": "<job_id>:<n>", "type": "trajectory" | "failure", "record": {...}}   the n-th record
  {"cursor": ..., "type": "episode", "record": {...}}  a multi-role task's record: its `trajectories`
                                                       (one per role, docs/roles.md)
  {"cursor": ..., "type": "heartbeat"}            (wait=true) nothing new for a while; ignore
  {"cursor": ..., "type": "end", "progress": {...}}   the job is finished and every record was sent
A client that loses the connection asks again with `cursor=` the last cursor it processed and
receives exactly the records after it. A cursor names its job, so one job's cursor is refused
on another. Without `wait` the response ends when the records available now are sent; with
`wait=true` it stays open until the job finishes (the `end` line). Only the `end` line means the
job is finished: a response that ends without one (the queue became unreachable mid-stream, say
Redis restarting) is resumed from the last cursor, as after a dropped connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, UpstreamError
from rollgate.jobs.queue import JobQueue, decode_record

log = logging.getLogger("rollgate.gateway")

HEARTBEAT_S = 10.0
BATCH = 500
NDJSON = "application/x-ndjson"


def make_cursor(job_id: str, position: int) -> str:
    return f"{job_id}:{position}"


def parse_cursor(job_id: str, cursor: str | None) -> int:
    if not cursor:
        return 0
    owner, _, pos = cursor.rpartition(":")
    if not owner or not (pos.isascii() and pos.isdigit()):  # "²" is a digit to str.isdigit, not to int()
        raise BadRequest(
            f"cursor: malformed cursor {cursor[:80]!r}; pass the `cursor` of the last line you processed",
            component="gateway",
            field="cursor",
        )
    if owner != job_id:
        raise BadRequest(
            f"cursor: this cursor belongs to job {owner[:64]!r}, not {job_id!r}", component="gateway", field="cursor"
        )
    return int(pos)


def _line(job_id: str, position: int, kind: str, record: bytes | None = None, extra: dict | None = None) -> bytes:
    head = b'{"cursor":' + jsonutil.dumps(make_cursor(job_id, position)) + b',"type":"' + kind.encode() + b'"'
    if record is not None:
        head += b',"record":' + record
    for key, value in (extra or {}).items():
        head += b"," + jsonutil.dumps(key) + b":" + jsonutil.dumps(value)
    return head + b"}\n"


async def results_response(
    queue: JobQueue, job_id: str, *, cursor: str | None, wait: bool, limit: int | None
) -> StreamingResponse:
    # Everything that can fail with a 4xx is checked before the first byte is sent.
    first = await queue.progress(job_id)
    position = parse_cursor(job_id, cursor)
    if position > first.done:
        raise BadRequest(
            f"cursor: position {position} is past the {first.done} records of job {job_id}",
            component="gateway",
            field="cursor",
        )

    async def lines() -> AsyncIterator[bytes]:
        pos = position
        sent = 0
        try:
            while True:
                want = BATCH if limit is None else min(BATCH, limit - sent)
                if wait:
                    batch = await queue.wait_results(job_id, pos, limit=want, timeout_s=HEARTBEAT_S)
                else:
                    batch = await queue.results(job_id, pos, want)
                for stored in batch:
                    pos += 1
                    sent += 1
                    kind, raw = decode_record(stored)
                    yield _line(job_id, pos, kind, raw)
                if limit is not None and sent >= limit:
                    return
                if batch:
                    continue
                prog = await queue.progress(job_id)
                if prog.finished and pos >= prog.total:
                    yield _line(job_id, pos, "end", extra={"progress": prog.model_dump(mode="json")})
                    return
                if not wait:
                    return
                yield _line(job_id, pos, "heartbeat")
        except UpstreamError as exc:
            # The headers are sent, so no error answer is possible: end the response, and the
            # client resumes from its last cursor. An outage of the queue, not a server bug.
            log.warning("results stream of job %s ended at %s: %s", job_id, make_cursor(job_id, pos), exc)

    return StreamingResponse(lines(), media_type=NDJSON, headers={"x-job-id": job_id, "cache-control": "no-store"})
