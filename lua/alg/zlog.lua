-- zlog.lua: sliding logs too large to pack ('z': p1 = window µs, p2 = the
-- index of the set's log in the previous layout, read through under
-- Options.Upgrade, 0 = none): the log rules of a dimension set whose
-- limit is above driver.LogLine (the others are packed: alg/log.lua).
-- They share ONE sorted set, whatever they are (backends/redis logKey:
-- the set's key and "%l"): one member per admitted unit, scored by server
-- µs, trimmed to the longest window of the request's such rules of the
-- set; each rule counts its own window (ZCOUNT). The hold marker is the
-- member '!<lapse ms>' scored BIG (prelude.lua). take.lua pastes the read
-- section once per log, with lg.w its longest window and lg.name its
-- first rule's name (the fast scripts run packed logs only).

--@read
-- The log at key, trimmed to its longest window w, and its two highest
-- members: the newest entry and the hold marker, if any. A log found
-- empty is first filled from lg.prev, when given: the dimension set's log
-- as the previous layout named it ("%l" and a hash of its log rules'
-- tags), copied (ZUNIONSTORE, nothing when it is gone), then read again.
for pass = 1, 2 do
  local d = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', sf('%d', now - lg.w))
  if type(d) == 'table' then
    fail = redis.error_reply('freqcap: rule ' .. lg.name .. ': the sliding log key is not a sorted set (WRONGTYPE)' .. UNTOUCHED)
    break
  end
  local z = redis.call('ZRANGE', key, -2, -1, 'WITHSCORES')
  for k = 1, #z, 2 do
    if string.sub(z[k], 1, 1) == '!' then
      lg.markm, lg.mark = z[k], tonumber(string.sub(z[k], 2))
    else
      lg.top, lg.newest = z[k], tonumber(z[k + 1])
    end
  end
  if pass == 2 or #z > 0 or not lg.prev then break end
  local u = redis.pcall('ZUNIONSTORE', key, 1, lg.prev) -- an error for a key of another type
  if type(u) ~= 'number' or u == 0 then break end
  local at = (now + lg.w) / 1000 -- ms, rounded up
  if at % 1 ~= 0 then at = at - at % 1 + 1 end
  redis.call('PEXPIREAT', key, sf('%d', at + EXPSLACK))
end
if fail then break end

--@eval
local W = tonumber(ARGV[b + R_P1])
local lo = sf('(%d', now - W)
used = redis.call('ZCOUNT', key, lo, BELOW)
if used > 0 then reset = lg.newest + W - now end
if c > L then
  flags = RULE_TOOHIGH
elseif used + c > L then
  flags = RULE_DENIED
  local z = redis.call('ZRANGEBYSCORE', key, lo, BELOW, 'WITHSCORES', 'LIMIT', used + c - L - 1, 1)
  retry = tonumber(z[2]) + W - now
end

--@commit
-- c members, once per log however many rules share it.
if not lg.done then
  lg.done = true
  local pre = sf('%d', now)
  local seq = 0
  if lg.newest == now and string.sub(lg.top, 1, #pre) == pre then
    -- members at this µs exist already (the newest sorts highest):
    -- continue after it.
    seq = tonumber(string.sub(lg.top, #pre + 2)) or 0
  end
  local ms
  if c == 1 then -- the common case, without the lists
    local q = sf('%d', seq + 1)
    ms = pre .. #q .. q
    redis.call('ZADD', key, pre, ms)
  else
    local za = {}
    ms = {}
    for k = 1, c do
      local q = sf('%d', seq + k)
      local m = pre .. #q .. q -- length-prefixed: sorts numerically
      za[#za + 1] = pre
      za[#za + 1] = m
      ms[k] = m
    end
    for k = 1, #za, 1998 do redis.call('ZADD', key, unpack(za, k, math.min(#za, k + 1997))) end
    ms = table.concat(ms, ',')
  end
  local at = (now + lg.w) / 1000 -- ms, rounded up
  if at % 1 ~= 0 then at = at - at % 1 + 1 end
  redis.call('PEXPIREAT', key, sf('%d', at + EXPSLACK))
  if plan then plan[#plan + 1] = 'l ' .. key .. ' ' .. ms end
end
used, reset = used + c, tonumber(ARGV[b + R_P1])

--@refund
-- "l <key> <member>,<member>,...": the members go.
local m = {}
for w in string.gmatch(f[3], '[^,]+') do m[#m + 1] = w end
for k = 1, #m, 999 do redis.call('ZREM', key, unpack(m, k, math.min(#m, k + 998))) end
