-- log.lua: sliding logs ('l': p1 = window µs). The log rules of a request
-- that share their dimensions share ONE sorted set (the group's key plus
-- "%l"): one member per admitted unit, scored by server µs, trimmed to the
-- longest of their windows; each rule counts its own window (ZCOUNT). The
-- hold marker is the member '!<lapse ms>' scored BIG (prelude.lua).

-- logRead trims the log at key to its longest window w and reads its two
-- highest members: the newest entry and the hold marker, if any. It
-- returns the log's state, or nil and an error reply.
local function logRead(key, w, now, name)
  local d = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', fmt(now - w))
  if type(d) == 'table' then
    return nil, redis.error_reply('freqcap: rule ' .. name .. ': the sliding log key is not a sorted set (WRONGTYPE); not evaluated, nothing written (delete the key or reset the subject)')
  end
  local lg = {w = w}
  local z = redis.call('ZRANGE', key, -2, -1, 'WITHSCORES')
  for k = 1, #z, 2 do
    if string.sub(z[k], 1, 1) == '!' then
      lg.markm, lg.mark = z[k], tonumber(string.sub(z[k], 2))
    else
      lg.top, lg.newest = z[k], tonumber(z[k + 1])
    end
  end
  lg.any = #z > 0
  return lg
end

local function logEval(x, ru, c)
  local W = tonumber(ru.p1)
  local key = x.key(ru.ki)
  local lg = x.logs[ru.ki]
  local lo = '(' .. fmt(x.now - W)
  local used = redis.call('ZCOUNT', key, lo, '(' .. BIG)
  local reset, retry, flags = 0, 0, 1
  if used > 0 then reset = lg.newest + W - x.now end
  if c > ru.L then
    flags = 2
  elseif used + c > ru.L then
    flags = 0
    local z = redis.call('ZRANGEBYSCORE', key, lo, '(' .. BIG, 'WITHSCORES', 'LIMIT', used + c - ru.L - 1, 1)
    retry = tonumber(z[2]) + W - x.now
  end
  ru.st = {W, used}
  return flags, used, reset, retry
end

-- logCommit adds c members to the rule's log, once per log however many
-- rules share it.
local function logCommit(x, ru, c)
  local lg = x.logs[ru.ki]
  if not lg.done then
    lg.done = true
    local key = x.key(ru.ki)
    local pre = fmt(x.now)
    local seq = 0
    if lg.newest == x.now and string.sub(lg.top, 1, #pre) == pre then
      -- members at this µs exist already (the newest sorts highest):
      -- continue after it.
      seq = tonumber(string.sub(lg.top, #pre + 2)) or 0
    end
    local za, ms = {}, {}
    for k = 1, c do
      local q = tostring(seq + k)
      local m = pre .. #q .. q -- length-prefixed: sorts numerically
      za[#za + 1] = pre
      za[#za + 1] = m
      ms[k] = m
    end
    chunked('ZADD', key, za, 1, 2)
    redis.call('PEXPIREAT', key, fmt(math.ceil((x.now + lg.w) / 1000)))
    if x.plan then x.plan[#x.plan + 1] = 'l ' .. key .. ' ' .. table.concat(ms, ',') end
  end
  return nil, ru.st[2] + c, ru.st[1]
end

-- logMark sets the hold marker of the log at key to lapse (ms), or
-- removes it (lapse nil); an empty log gets none.
local function logMark(key, lg, lapse)
  if lg.markm then redis.call('ZREM', key, lg.markm) end
  if lapse and (lg.top or redis.call('EXISTS', key) == 1) then
    redis.call('ZADD', key, BIG, '!' .. fmt(lapse))
  end
end
