-- cell.lua: GCRA on redis-cell ('x': limit = burst+1, p1 = emission
-- interval T µs, p2 = "<count>:<period s>" for CL.THROTTLE, count/period
-- = 1/T exactly), one key per rule holding CL.THROTTLE's own TAT (ns since
-- the epoch). redis-cell decides (CL.THROTTLE with quantity 0 peeks: it
-- writes and creates nothing); the numbers it rounds to whole seconds are
-- computed here from its TAT instead, never shorter than the truth.

-- nsup turns a redis-cell TAT (ns since the epoch, an integer string too
-- long for a double; tatok) into µs, rounded up.
local function nsup(v)
  local us = tonumber(string.sub(v, 1, -4)) or 0
  if string.sub(v, -3) ~= string.rep('0', math.min(#v, 3)) then us = us + 1 end
  return us
end

-- cellForeign returns an error reply when key, the state key of rule
-- name, holds anything but a TAT CL.THROTTLE wrote, else nil and the
-- value. It reads with pcall: a key of another type (WRONGTYPE) is
-- refused the same way. The reply names the rule, never the key.
local function cellForeign(key, name)
  local v = redis.pcall('GET', key)
  local bad
  if type(v) == 'table' and v.err then
    bad = 'is not a string key (WRONGTYPE)'
  elseif v and not tatok(v) then
    bad = 'holds a value CL.THROTTLE did not write (it would abort the server on it)'
  end
  if bad then
    return redis.error_reply('freqcap: rule ' .. name .. ': the GCRA state key ' .. bad .. '; not evaluated, nothing written (delete the key or reset the subject)')
  end
  return nil, v
end

local function cellEval(x, ru, c)
  local L, T = ru.L, tonumber(ru.p1)
  local key = x.key(ru.ki)
  local cnt, per = string.match(ru.p2, '^(%d+):(%d+)$')
  local v = ru.tat -- read by cellForeign, before anything was written
  local pk = redis.call('CL.THROTTLE', key, L - 1, cnt, per, 0)
  local ttl = 0
  if v then ttl = math.max(nsup(v) - x.now, 0) end
  local rem = tonumber(pk[3])
  local retry, flags = 0, 1
  if c > L then
    flags = 2
  elseif rem < c then
    flags, retry = 0, math.max(1, ttl + c * T - T * L)
  end
  if rem < 0 then rem = 0 elseif rem > L then rem = L end
  ru.st = {cnt, per, T, v}
  return flags, L - rem, ttl, retry
end

-- cellRefund takes inc ns off the TAT at key. The TAT is ns since the
-- epoch: too long for a double, so it is split into seconds and
-- nanoseconds. A redis-cell key is only ever given an integer TAT or
-- deleted: CL.THROTTLE aborts the server on anything else.
local function cellRefund(key, inc, now)
  local v = redis.pcall('GET', key) -- a table for another type
  if type(v) == 'string' and #v > 9 and tatok(v) then
    local sec = tonumber(string.sub(v, 1, -10)) - math.floor(inc / 1e9)
    local ns = tonumber(string.sub(v, -9)) - inc % 1e9
    if ns < 0 then ns, sec = ns + 1e9, sec - 1 end
    local left = (sec - math.floor(now / 1e6)) * 1e6 + (ns / 1000 - now % 1e6) -- µs
    local was = left + inc / 1000
    if was > 0 then
      if left > 0 then
        redis.call('SET', key, string.format('%d%09d', sec, ns), 'PX', fmt(math.ceil(left / 1000)))
      else
        redis.call('DEL', key)
      end
    end
  end
end
