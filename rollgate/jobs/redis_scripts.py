"""The Lua scripts of the Redis job queue (rollgate.jobs.redis): each runs atomically in Redis,
so a check and its write can never interleave with another worker's.

CLAIM and TOUCH name the per-job streams they read from the active-job list rather than in KEYS:
fine on one Redis server (what compose and k8s run), not on a Redis Cluster."""

# KEYS: queued, active, tasks, spec, jobs, stats, stream, bell
# ARGV: max queued, n, job id, spec JSON, created_at, ttl, priority, then key, task JSON pairs
SUBMIT = """
local max, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local q = tonumber(redis.call('GET', KEYS[1]) or '0')
if q + n > max then return {0, q} end
redis.call('INCRBY', KEYS[1], n)
local job, ttl = ARGV[3], tonumber(ARGV[6])
redis.call('SET', KEYS[4], ARGV[4], 'EX', ttl)
redis.call('ZADD', KEYS[5], tonumber(ARGV[5]), job)
redis.call('HSET', KEYS[6], 'total', n, 'done', 0, 'state', 'running', 'priority', ARGV[7])
redis.pcall('XGROUP', 'CREATE', KEYS[7], 'workers', '0', 'MKSTREAM')
for i = 8, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  redis.call('XADD', KEYS[7], '*', 'key', ARGV[i])
end
redis.call('EXPIRE', KEYS[3], ttl)
redis.call('EXPIRE', KEYS[6], ttl)
redis.call('EXPIRE', KEYS[7], ttl)
redis.call('RPUSH', KEYS[2], job)
redis.call('XADD', KEYS[8], 'MAXLEN', '~', 100, '*', 'job', job)
return {1, q + n}
"""

# Fair share: the active jobs form a ring (a LIST rotated with LMOVE). The job at its head gives
# up to `priority` tasks (its credit, kept across calls and workers), then moves to the back.
# Tasks of workers presumed dead (idle past the visibility timeout) are taken over first.
# KEYS: active, credit, bell ; ARGV: prefix, consumer, count, visibility timeout in ms
# -> {the bell's last id, {job, entry id, key, reclaimed 0|1, ...}}
CLAIM = """
local prefix, consumer, want, idle = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local out, got_n = {}, 0
local function stream(job) return prefix .. ':job:' .. job .. ':stream' end
local function add(job, e, reclaimed)
  if e and e[2] then
    out[#out + 1] = job; out[#out + 1] = e[1]; out[#out + 1] = e[2][2]; out[#out + 1] = reclaimed
    got_n = got_n + 1
  end
end
local jobs = redis.call('LRANGE', KEYS[1], 0, -1)
for _, job in ipairs(jobs) do
  if got_n >= want then break end
  local r = redis.pcall('XAUTOCLAIM', stream(job), 'workers', consumer, idle, '0-0', 'COUNT', want - got_n)
  if type(r) == 'table' and not r.err then
    for _, e in ipairs(r[2]) do add(job, e, '1') end
  end
end
local n, empty = #jobs, 0
while got_n < want and empty < n do
  local job = redis.call('LINDEX', KEYS[1], 0)
  if not job then break end
  local credit = tonumber(redis.call('GET', KEYS[2]) or '0')
  if credit <= 0 then
    credit = tonumber(redis.call('HGET', prefix .. ':job:' .. job .. ':stats', 'priority') or '1') or 1
  end
  local take = math.min(credit, want - got_n)
  local got = redis.pcall('XREADGROUP', 'GROUP', 'workers', consumer, 'COUNT', take, 'STREAMS', stream(job), '>')
  if type(got) == 'table' and got.err then
    -- its stream is gone (the job expired, or Redis lost it): drop it from the ring
    redis.call('LREM', KEYS[1], 1, job)
    n = n - 1
    credit = 0
  else
    local items = (got and got[1] and got[1][2]) or {}
    for _, e in ipairs(items) do add(job, e, '0') end
    credit = credit - #items
    if #items == 0 then empty = empty + 1 else empty = 0 end
    if credit <= 0 or #items < take then
      redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
      credit = 0
    end
  end
  redis.call('SET', KEYS[2], credit)
end
local bell = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
return {(bell[1] and bell[1][1]) or '0-0', out}
"""

# KEYS: done, results, stats, stream, queued, active
# ARGV: key, record, entry id or '', label, reward or '', ttl, now, job id
COMPLETE = """
local entry = ARGV[3]
if redis.call('HSETNX', KEYS[1], ARGV[1], '1') == 0 then
  if entry ~= '' then redis.call('XACK', KEYS[4], 'workers', entry); redis.call('XDEL', KEYS[4], entry) end
  return 0
end
local pos = redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'done', 1)
redis.call('HINCRBY', KEYS[3], 'o:' .. ARGV[4], 1)
if ARGV[5] ~= '' then
  redis.call('HINCRBYFLOAT', KEYS[3], 'rsum', ARGV[5])
  redis.call('HINCRBY', KEYS[3], 'rn', 1)
end
if entry ~= '' then redis.call('XACK', KEYS[4], 'workers', entry); redis.call('XDEL', KEYS[4], entry) end
if tonumber(redis.call('GET', KEYS[5]) or '0') > 0 then redis.call('DECR', KEYS[5]) end
local ttl = tonumber(ARGV[6])
redis.call('EXPIRE', KEYS[1], ttl); redis.call('EXPIRE', KEYS[2], ttl)
local s = redis.call('HMGET', KEYS[3], 'done', 'total', 'state')
if s[3] == 'running' and tonumber(s[1]) >= tonumber(s[2]) then
  redis.call('HSET', KEYS[3], 'state', 'done', 'finished_at', ARGV[7])
  redis.call('LREM', KEYS[6], 0, ARGV[8])
end
return pos
"""

# Renew (or, with a large IDLE, give back) only the entries this consumer still owns: a worker
# that stalled past the timeout must not take a task back from the worker now running it.
# ARGV: consumer, idle ms, then stream, entry id pairs (a stream that is gone is skipped).
TOUCH = """
local n = 0
for i = 3, #ARGV, 2 do
  local p = redis.pcall('XPENDING', ARGV[i], 'workers', ARGV[i + 1], ARGV[i + 1], 1)
  if type(p) == 'table' and not p.err and p[1] and p[1][2] == ARGV[1] then
    redis.call('XCLAIM', ARGV[i], 'workers', ARGV[1], 0, ARGV[i + 1], 'IDLE', ARGV[2], 'JUSTID')
    n = n + 1
  end
end
return n
"""
