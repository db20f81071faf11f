"""The Lua scripts of the Redis job queue (rollgate.jobs.redis): each runs atomically in Redis,
so a check and its write can never interleave with another worker's.

Every script but CLAIM touches the keys of one hash slot only, so they run on a Redis Cluster:
one job's keys share the slot of `{job:<id>}`, the queue's global keys (active, credit, bell,
jobs) the slot of the queue's prefix. CLAIM walks every active job's stream in one round trip,
which only one Redis server can do; on a cluster the queue claims with RING then CLAIM_JOB per
job (rollgate.jobs.redis_claim)."""

# One job's keys. KEYS: tasks, spec, stats, stream
# ARGV: n, spec JSON, ttl, priority, then key, task JSON pairs
SUBMIT_JOB = """
local n, ttl = tonumber(ARGV[1]), tonumber(ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ttl)
redis.call('HSET', KEYS[3], 'total', n, 'done', 0, 'state', 'running', 'priority', ARGV[4])
redis.pcall('XGROUP', 'CREATE', KEYS[4], 'workers', '0', 'MKSTREAM')
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('XADD', KEYS[4], '*', 'key', ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[3], ttl)
redis.call('EXPIRE', KEYS[4], ttl)
return 1
"""

# Then the job joins the queue's global keys (their own slot): it is listed and claimable, and
# idle workers wake. KEYS: jobs, active, bell, prio ; ARGV: job id, created_at, priority
ADMIT = """
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]), ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 100, '*', 'job', ARGV[1])
return 1
"""

# Fair share: the active jobs form a ring (a LIST rotated with LMOVE). The job at its head gives
# up to `priority` tasks (its credit, kept across calls and workers), then moves to the back.
# Tasks of workers presumed dead (idle past the visibility timeout) are taken over first.
# One Redis server only: it names the per-job streams it reads from the active list.
# KEYS: active, credit, bell, prio ; ARGV: prefix, consumer, count, visibility timeout in ms
# -> {the bell's last id, {job, entry id, key, reclaimed 0|1, ...}}
CLAIM = """
local prefix, consumer, want, idle = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local out, got_n = {}, 0
local function jk(job, part) return prefix .. ':{job:' .. job .. '}:' .. part end
local function stream(job) return jk(job, 'stream') end
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
    credit = tonumber(redis.call('HGET', jk(job, 'stats'), 'priority') or '1') or 1
  end
  local take = math.min(credit, want - got_n)
  local got = redis.pcall('XREADGROUP', 'GROUP', 'workers', consumer, 'COUNT', take, 'STREAMS', stream(job), '>')
  local gone = type(got) == 'table' and got.err
  local items = (not gone and got and got[1] and got[1][2]) or {}
  if gone or (#items == 0 and redis.call('HGET', jk(job, 'stats'), 'state') ~= 'running') then
    -- its stream is gone (the job expired, or Redis lost it), or it is no longer running and a
    -- crash kept it from leaving: drop it from the ring
    redis.call('LREM', KEYS[1], 1, job)
    redis.call('HDEL', KEYS[4], job)
    n = n - 1
    credit = 0
  else
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

# KEYS: done, results, stats, stream
# ARGV: key, record, entry id ('' for the queue's own records: cancel, data loss), label,
#       reward or '', ttl, now
# -> {position of the record (0: the task had one already), 1 when this record finished the job}
COMPLETE = """
local entry = ARGV[3]
local st = redis.call('HGET', KEYS[3], 'state')
-- A worker's record counts only while the job can take it: never into a job whose state vanished
-- or that was failed for it (rollgate.jobs.redis_loss rebuilds those records alone, in order).
local open = st and (entry == '' or st == 'running' or st == 'cancelled')
if not open or redis.call('HSETNX', KEYS[1], ARGV[1], '1') == 0 then
  if entry ~= '' then redis.call('XACK', KEYS[4], 'workers', entry); redis.call('XDEL', KEYS[4], entry) end
  return {0, 0}
end
local pos = redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'done', 1)
redis.call('HINCRBY', KEYS[3], 'o:' .. ARGV[4], 1)
if ARGV[5] ~= '' then
  redis.call('HINCRBYFLOAT', KEYS[3], 'rsum', ARGV[5])
  redis.call('HINCRBY', KEYS[3], 'rn', 1)
end
if entry ~= '' then redis.call('XACK', KEYS[4], 'workers', entry); redis.call('XDEL', KEYS[4], entry) end
local ttl = tonumber(ARGV[6])
redis.call('EXPIRE', KEYS[1], ttl); redis.call('EXPIRE', KEYS[2], ttl)
local s = redis.call('HMGET', KEYS[3], 'done', 'total', 'state')
if s[3] == 'running' and tonumber(s[1]) >= tonumber(s[2]) then
  redis.call('HSET', KEYS[3], 'state', 'done', 'finished_at', ARGV[7])
  return {pos, 1}
end
return {pos, 0}
"""

# Renew (or, with a large IDLE, give back) only the entries this consumer still owns: a worker
# that stalled past the timeout must not take a task back from the worker now running it.
# KEYS: one job's stream ; ARGV: consumer, idle ms, then entry ids (a stream that is gone is skipped).
TOUCH = """
local n = 0
for i = 3, #ARGV do
  local p = redis.pcall('XPENDING', KEYS[1], 'workers', ARGV[i], ARGV[i], 1)
  if type(p) == 'table' and not p.err and p[1] and p[1][2] == ARGV[1] then
    redis.call('XCLAIM', KEYS[1], 'workers', ARGV[1], 0, ARGV[i], 'IDLE', ARGV[2], 'JUSTID')
    n = n + 1
  end
end
return n
"""

# Cluster claiming, step 1 (the global slot): deal COUNT tasks over the ring as CLAIM does on one
# server (the job at the head gives up to its priority, its credit kept across calls and
# workers, then moves to the back), from the priorities ADMIT recorded, without reading streams.
# KEYS: active, credit, bell, prio ; ARGV: count
# -> {the bell's last id, {job, share, ...}, the ring after the deal}
RING = """
local left, n = tonumber(ARGV[1]), redis.call('LLEN', KEYS[1])
local credit = tonumber(redis.call('GET', KEYS[2]) or '0')
local shares, order, steps = {}, {}, 0
while left > 0 and n > 0 and steps < tonumber(ARGV[1]) + n do
  local job = redis.call('LINDEX', KEYS[1], 0)
  if credit <= 0 then credit = tonumber(redis.call('HGET', KEYS[4], job) or '1') or 1 end
  local take = math.min(credit, left)
  if not shares[job] then shares[job] = 0; order[#order + 1] = job end
  shares[job] = shares[job] + take
  left = left - take
  credit = credit - take
  if credit <= 0 then redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT'); credit = 0 end
  steps = steps + 1
end
redis.call('SET', KEYS[2], credit)
local out = {}
for _, j in ipairs(order) do out[#out + 1] = j; out[#out + 1] = shares[j] end
local bell = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
return {(bell[1] and bell[1][1]) or '0-0', out, redis.call('LRANGE', KEYS[1], 0, -1)}
"""

# A job leaves the ring (finished, cancelled, expired or lost). KEYS: active, prio ; ARGV: job id
LEAVE = """
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""

# Step 2 (one job's slot): tasks of workers presumed dead first, then new ones, up to COUNT.
# KEYS: stream, stats ; ARGV: consumer, count, visibility timeout in ms
# -> {0} when the job is no longer claimable (finished, cancelled, expired or lost: drop it from
#    the ring), else {1, {entry id, key, reclaimed 0|1, ...}, priority}
CLAIM_JOB = """
local st, prio = unpack(redis.call('HMGET', KEYS[2], 'state', 'priority'))
if st ~= 'running' or redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local consumer, want = ARGV[1], tonumber(ARGV[2])
local out = {}
local r = redis.pcall('XAUTOCLAIM', KEYS[1], 'workers', consumer, ARGV[3], '0-0', 'COUNT', want)
if type(r) == 'table' and not r.err then
  for _, e in ipairs(r[2]) do
    if e and e[2] then out[#out + 1] = e[1]; out[#out + 1] = e[2][2]; out[#out + 1] = '1' end
  end
end
local left = want - #out / 3
if left > 0 then
  local got = redis.pcall('XREADGROUP', 'GROUP', 'workers', consumer, 'COUNT', left, 'STREAMS', KEYS[1], '>')
  if type(got) == 'table' and got.err then return {0} end
  for _, e in ipairs((got and got[1] and got[1][2]) or {}) do
    out[#out + 1] = e[1]; out[#out + 1] = e[2][2]; out[#out + 1] = '0'
  end
end
return {1, out, prio or '1'}
"""
