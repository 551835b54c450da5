-- logfloor.lua: the floor of the sliding-log layout (docs/DESIGN.md,
-- "Redis layout": the log rules of a dimension set share ONE sorted set,
-- one member per unit, trimmed to the longest window, each rule counting
-- its own window), which `freqcap bench -raw -floor` runs beside raw(R) for
-- a policy of sliding logs: the cheapest script that keeps R logs in one
-- sorted set per subject and decides all-or-nothing: TIME, ZREMRANGEBYSCORE
-- to the longest window, ZCOUNT per rule, admit iff every count is under a
-- limit, ZADD one member, PEXPIRE; reply {allowed, now}. No reservations,
-- trail, idempotency, per-rule details (reset, retry), hold markers or
-- members sharing a µs (take.lua reads the newest member for these: one
-- ZRANGE more). It is not used by the backend.
--
-- KEYS[1]: the subject's sorted set
-- ARGV[1..R]: the rules' windows, ms, the longest first
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local key = KEYS[1]
local longest = tonumber(ARGV[1]) * 1000
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - longest))
for r = 1, #ARGV do
  local lo = '(' .. string.format('%d', now - tonumber(ARGV[r]) * 1000)
  if redis.call('ZCOUNT', key, lo, '+inf') >= 1000000 then return {0, now} end
end
local m = string.format('%d', now)
redis.call('ZADD', key, m, m)
redis.call('PEXPIRE', key, ARGV[1])
return {1, now}
