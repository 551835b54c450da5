-- modsliding.lua: sliding window counters on a module's per-field expiry,
-- one key per rule (p1 = K, p2 = cell µs, as 's'): 't' a TairHash, 'h' a
-- hash with native field expiry (Redis >= 7.4). One field per cell, named
-- by its index, that expires by itself.

local function modslidingEval(x, ru, c)
  local K, s = tonumber(ru.p1), tonumber(ru.p2)
  local i = math.floor(x.now / s)
  local lo = i - K
  local key = x.key(ru.ki)
  -- Cells are counted by index, never by expiry: fields expire by
  -- themselves (EXHGETALL/HGETALL skip expired ones), but against clocks
  -- other than this TIME, so expiry only reclaims memory.
  local h
  if ru.code == 't' then h = redis.call('EXHGETALL', key) else h = redis.call('HGETALL', key) end
  local cs, used, newest = {}, 0, -1
  for k = 1, #h, 2 do
    local j = tonumber(h[k])
    if j and j >= lo then
      local v = tonumber(h[k + 1])
      if v > 0 then
        cs[j] = v
        used = used + v
        if j > newest then newest = j end
      end
    end
  end
  local reset, retry, flags = 0, 0, 1
  if newest >= 0 then reset = (newest + K + 1) * s - x.now end
  if c > ru.L then
    flags = 2
  elseif used + c > ru.L then
    flags, retry = 0, slidingRetry(cs, lo, i, used + c - ru.L, K, s, x.now)
  end
  ru.st = {i, (i + K + 1) * s, used}
  return flags, used, reset, retry
end

local function modslidingCommit(x, ru, c)
  local key = x.key(ru.ki)
  local f, leaves, used = fmt(ru.st[1]), ru.st[2], ru.st[3]
  local cs = fmt(c)
  if ru.code == 't' then
    -- EXHINCRBY without a TTL option (EX/PX/PXAT replicate a wrong TTL,
    -- and the bare increment removes the TTL), then EXHPEXPIREAT: the
    -- field lives to the last ms the cell counts, (i+K+1)*s - 1.
    redis.call('EXHINCRBY', key, f, cs)
    redis.call('EXHPEXPIREAT', key, f, fmt(math.floor(leaves / 1000) - 1))
    if x.plan then x.plan[#x.plan + 1] = 't ' .. key .. ' ' .. f .. ' ' .. cs .. ' ' .. fmt(leaves) end
  else
    -- HINCRBY keeps a field's TTL; NX sets it on the cell's first unit.
    -- Absolute, one ms after the cell stops counting, (i+K+1)*s: never
    -- before.
    redis.call('HINCRBY', key, f, cs)
    redis.call('HPEXPIREAT', key, fmt(math.floor(leaves / 1000)), 'NX', 'FIELDS', 1, f)
    if x.plan then x.plan[#x.plan + 1] = 'h ' .. key .. ' ' .. f .. ' ' .. cs .. ' ' .. fmt(leaves) end
  end
  return nil, used + c, leaves - x.now
end

-- modslidingRefund gives back c units of a cell field while it counts
-- (now < dies). ex is 'EX' for a TairHash, '' for a hash. TairHash's
-- EXHGET of a missing field gives false (and removes an empty key left by
-- a failed EXHINCRBY ... MAX); a bare EXHINCRBY drops the field's TTL, so
-- EXHPEXPIREAT sets it again. HINCRBY keeps a hash field's TTL.
local function modslidingRefund(ex, key, f, c, dies, now)
  if now >= dies then return end
  local v = tonumber(redis.call(ex .. 'HGET', key, f)) or 0
  local d = math.min(c, v)
  if d > 0 and d == v then
    redis.call(ex .. 'HDEL', key, f)
  elseif d > 0 then
    redis.call(ex .. 'HINCRBY', key, f, fmt(-d))
    if ex == 'EX' then
      redis.call('EXHPEXPIREAT', key, f, fmt(math.floor(dies / 1000) - 1))
    end
  end
end
