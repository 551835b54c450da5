-- modsliding.lua: sliding window counters on a module's per-field expiry,
-- one key per rule (p1 = K, p2 = cell µs, as 's'): 't' a TairHash, 'h' a
-- hash with native field expiry (Redis >= 7.4). One field per cell, named
-- by its index, that expires by itself.

--@eval
local K, s = tonumber(ARGV[b + R_P1]), tonumber(ARGV[b + R_P2])
local i = math.floor(now / s)
local lo = i - K
-- Cells are counted by index, never by expiry: fields expire by
-- themselves (EXHGETALL/HGETALL skip expired ones), but against clocks
-- other than this TIME, so expiry only reclaims memory.
local h
if code == C_TAIRHASH then h = redis.call('EXHGETALL', key) else h = redis.call('HGETALL', key) end
local cs, newest = {}, -1
for k = 1, #h, 2 do
  local j = tonumber(h[k])
  if j and j >= lo then
    local u = tonumber(h[k + 1])
    if u > 0 then
      cs[j] = u
      used = used + u
      if j > newest then newest = j end
    end
  end
end
if newest >= 0 then reset = (newest + K + 1) * s - now end
if c > L then
  flags = RULE_TOOHIGH
elseif used + c > L then
  -- Retry when the oldest cells holding the units over stop counting
  -- (cells beyond i, the server clock having gone back: one cell).
  flags, retry = RULE_DENIED, s
  local need, acc = used + c - L, 0
  for j = lo, i do
    acc = acc + (cs[j] or 0)
    if acc >= need then
      retry = (j + K + 1) * s - now
      break
    end
  end
end
st[r] = {i, (i + K + 1) * s}

--@commit
-- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
-- alg.Exempt): c is what this rule takes, none once it is there.
local c = c
if used + c > MAXUSED then
  c = MAXUSED - used
  if c < 0 then c = 0 end
end
local fld, leaves, cs = sf('%d', x[1]), x[2], sf('%d', c)
if c == 0 then
  -- none taken (saturated): reported as evaluated
elseif code == C_TAIRHASH then
  -- EXHINCRBY without a TTL option (EX/PX/PXAT replicate a wrong TTL,
  -- and the bare increment removes the TTL), then EXHPEXPIREAT: the
  -- field lives SLACKMS past the last ms the cell counts, (i+K+1)*s - 1
  -- (TairHash expires it by its own clock, later than this TIME).
  redis.call('EXHINCRBY', key, fld, cs)
  redis.call('EXHPEXPIREAT', key, fld, sf('%d', math.floor(leaves / 1000) - 1 + SLACKMS))
else
  -- HINCRBY keeps a field's TTL; NX sets it on the cell's first unit.
  -- Absolute, one ms after the cell stops counting, (i+K+1)*s: never
  -- before.
  redis.call('HINCRBY', key, fld, cs)
  redis.call('HPEXPIREAT', key, sf('%d', math.floor(leaves / 1000)), 'NX', 'FIELDS', 1, fld)
end
if plan then plan[#plan + 1] = code .. ' ' .. key .. ' ' .. fld .. ' ' .. cs .. ' ' .. sf('%d', leaves) end
if c > 0 then used, reset = used + c, leaves - now end

--@refund
-- "t|h <key> <cell field> <cost> <dies µs>" (and "s", the one-key-per-
-- rule layout's plain hash cell): c units back while the cell counts.
-- TairHash's EXHGET of a missing field gives false (and removes an empty
-- key left by a failed EXHINCRBY ... MAX); a bare EXHINCRBY drops the
-- field's TTL, so EXHPEXPIREAT sets it again. HINCRBY keeps a hash
-- field's TTL.
local fld, c, dies = f[3], tonumber(f[4]), tonumber(f[5])
if now < dies then
  local ex = ''
  if a == 't' then ex = 'EX' end
  local u = tonumber(redis.call(ex .. 'HGET', key, fld)) or 0
  local d = math.min(c, u)
  if d > 0 and d == u then
    redis.call(ex .. 'HDEL', key, fld)
  elseif d > 0 then
    redis.call(ex .. 'HINCRBY', key, fld, sf('%d', -d))
    if ex == 'EX' then
      redis.call('EXHPEXPIREAT', key, fld, sf('%d', math.floor(dies / 1000) - 1 + SLACKMS))
    end
  end
end
