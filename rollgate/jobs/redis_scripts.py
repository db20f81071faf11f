"""The Lua scripts of the Redis job queue (rollgate.jobs.redis): each runs atomically in Redis,
so a check and its write can never interleave with another worker's."""

SUBMIT = """
local max, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local q = tonumber(redis.call('GET', KEYS[1]) or '0')
if q + n > max then return {0, q} end
redis.call('INCRBY', KEYS[1], n)
local job, ttl = ARGV[3], tonumber(ARGV[6])
redis.call('SET', KEYS[4], ARGV[4], 'EX', ttl)
redis.call('ZADD', KEYS[5], tonumber(ARGV[5]), job)
redis.call('HSET', KEYS[6], 'total', n, 'done', 0, 'state', 'running')
for i = 7, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  redis.call('XADD', KEYS[2], '*', 'job', job, 'key', ARGV[i])
end
redis.call('EXPIRE', KEYS[3], ttl)
redis.call('EXPIRE', KEYS[6], ttl)
return {1, q + n}
"""

# KEYS: done, results, stats, stream, queued ; ARGV: key, record, entry id or '', label, reward or '', ttl, now
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
end
return pos
"""

# Renew (or, with a large IDLE, give back) only the entries this consumer still owns: a worker
# that stalled past the timeout must not take a task back from the worker now running it.
TOUCH = """
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], 'workers', ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[1] then
    redis.call('XCLAIM', KEYS[1], 'workers', ARGV[1], 0, ARGV[i], 'IDLE', ARGV[2], 'JUSTID')
    n = n + 1
  end
end
return n
"""
