-- widefloor.lua: the floor of a decision on a wide root (docs/DESIGN.md,
-- "Wide subjects"), which `freqcap bench -prefill K -raw -wide-floor`
-- runs beside raw(R): for each attempt of the call, the commands a take
-- on a wide root must send at the least (GET the root, HGET its value's
-- field, HSET the field, SET … PX the root), with values of about a
-- section's and a wide root's size, and no decoding, arithmetic or
-- decision. One call carries one attempt, or the queued calls of a
-- coalescing run (as redis.Options.Coalesce carries decisions). It is
-- not used by the backend.
--
-- KEYS: per attempt, its root and its root's hash (2 keys)
-- ARGV[1]: the root's TTL, ms; ARGV[2]: a field's value; ARGV[3]: the
-- root's value; ARGV[3+i]: attempt i's field
-- Reply: the number of attempts
local t = redis.call('TIME')
local n = #KEYS / 2
for i = 1, n do
  local root, hash, f = KEYS[2 * i - 1], KEYS[2 * i], ARGV[3 + i]
  redis.call('GET', root)
  redis.call('HGET', hash, f)
  redis.call('HSET', hash, f, ARGV[2])
  redis.call('SET', root, ARGV[3], 'PX', ARGV[1])
end
return n
