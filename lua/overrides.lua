-- overrides.lua: per-person overrides (driver.Overrider), kept in a hash
-- at KEYS[1] (driver.Request.OverrideKey): field = the override's ID,
-- value = backends/redis/storage.go's override format, whose first fields
-- "<kind>|<counted>|<until µs>|<created µs>|" this script reads and
-- writes. take.lua reads the same hash on the decision path.
--
-- ARGV[1] op:
--   s  set: ARGV[2] the ID, ARGV[3] until µs (0: none), ARGV[4] the value
--      before created, ARGV[5] the value after it. Reply: created µs, or
--      -1 when until has passed (nothing written).
--   d  delete: ARGV[2] the ID. Reply: 1 deleted, 0 not there or ended.
--   l  list: reply {now µs, then field, value, … of the live overrides}.
-- Every write drops the ended overrides and sets the key's expiry to the
-- latest until of those left (none while one has no until; the key is
-- deleted when none is left).

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local key, op = KEYS[1], ARGV[1]

-- untilOf returns the until (µs, 0 = none) of a stored value, or nil for
-- a value it cannot read.
local function untilOf(v)
  return tonumber(string.match(v, '^%a|%d|(%d+)|'))
end

local function live(v)
  local u = untilOf(v)
  return u ~= nil and (u == 0 or u > now)
end

-- tidy drops the ended overrides and sets the key's expiry.
local function tidy()
  local h = redis.call('HGETALL', key)
  local top, forever, left = 0, false, 0
  for k = 1, #h, 2 do
    local u = untilOf(h[k + 1])
    if u and u ~= 0 and u <= now then
      redis.call('HDEL', key, h[k])
    else
      left = left + 1
      if not u or u == 0 then forever = true elseif u > top then top = u end
    end
  end
  if left == 0 then
    redis.call('DEL', key)
  elseif forever then
    redis.call('PERSIST', key)
  else
    local ms = top / 1000
    if ms % 1 ~= 0 then ms = ms - ms % 1 + 1 end
    redis.call('PEXPIREAT', key, string.format('%d', ms))
  end
end

if op == 's' then
  local u = tonumber(ARGV[3])
  if u ~= 0 and u <= now then return -1 end
  redis.call('HSET', key, ARGV[2], ARGV[4] .. string.format('%d', now) .. ARGV[5])
  tidy()
  return now
elseif op == 'd' then
  local v = redis.call('HGET', key, ARGV[2])
  if not v then return 0 end
  local was = live(v)
  redis.call('HDEL', key, ARGV[2])
  tidy()
  if was then return 1 end
  return 0
elseif op == 'l' then
  local h = redis.call('HGETALL', key)
  local out = {now}
  for k = 1, #h, 2 do
    if live(h[k + 1]) then
      out[#out + 1] = h[k]
      out[#out + 1] = h[k + 1]
    end
  end
  return out
end
return redis.error_reply('freqcap: overrides: unknown op')
