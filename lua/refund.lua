-- refund.lua: shared prelude, prepended to take.lua and settle.lua (see
-- lua.go); it is not run on its own and uses no KEYS or ARGV itself.
--
-- A hold (reservation) is stored as one field of the hold hash:
--   field = hold id
--   value = "<expiry µs>" followed by one "\n<entry>" per rule, where an
--           entry gives back what the reservation took from one key:
--     "f <key> <window end ms> <cost>"          fixed window counter
--     "s <key> <cell field> <cost> <dies µs>"   sliding window cell (plain
--                                               hash, or native field expiry)
--     "t <key> <cell field> <cost> <dies µs>"   sliding window cell on TairHash
--     "l <key> <member>,<member>,..."           sliding log members
--     "g <key> <TAT increment µs>"              GCRA
--     "x <key> <TAT increment ns>"              GCRA on redis-cell
-- Keys never contain bytes below 0x21, so spaces and newlines separate.
--
-- refund(entry, now) applies one entry's refund. It never drives a count
-- below zero and skips state that has moved on: a fixed window that ended
-- (PEXPIRETIME differs), a cell that no longer counts (now >= dies, the
-- (i+K+1)*s take.lua computed), log members already
-- trimmed, a GCRA TAT already in the past. A redis-cell key is only ever
-- given an integer TAT or deleted: CL.THROTTLE aborts the server on
-- anything else. A GCRA key holding something other than a TAT (tatok) is
-- left alone: take.lua refuses to decide on it.

local function tatok(v)
  -- Reports whether v is a TAT as take.lua and CL.THROTTLE write it: 1 to
  -- 19 decimal digits, no sign, at most 2^63-1. CL.THROTTLE parses its key
  -- as an unsigned 64-bit integer and aborts the server on anything else
  -- ("", "abc", "-5", "+5" is accepted but never written, 20 digits); its
  -- arithmetic is in signed 64-bit ns.
  local n = #v
  return n >= 1 and n <= 19 and not string.find(v, '%D') and (n < 19 or v <= '9223372036854775807')
end

local function chunked(cmd, key, list, first, step)
  -- Calls cmd key list[first..] in slices, keeping unpack within Lua's
  -- C stack limit; step is the number of list items per element (ZADD: 2).
  local total = 0
  local n = #list
  local i = first
  while i <= n do
    local j = math.min(n, i + 999 * step)
    total = total + redis.call(cmd, key, unpack(list, i, j))
    i = j + 1
  end
  return total
end

local function refund(e, now)
  local p = {}
  for w in string.gmatch(e, '%S+') do p[#p + 1] = w end
  local a, key = p[1], p[2]
  if a == 'f' then
    if redis.call('PEXPIRETIME', key) == tonumber(p[3]) then
      local v = tonumber(redis.call('GET', key)) or 0
      local d = math.min(tonumber(p[4]), v)
      if d > 0 then redis.call('DECRBY', key, string.format('%d', d)) end
    end
  elseif a == 's' or a == 't' then
    -- A cell of a hash ('s': plain or native field expiry, whose HINCRBY
    -- keeps the field's TTL) or of a TairHash ('t': the same commands with
    -- EX in front). TairHash's EXHGET of a missing field gives false (and
    -- removes an empty key left by a failed EXHINCRBY ... MAX); a bare
    -- EXHINCRBY drops the field's TTL, so EXHPEXPIREAT sets it again.
    if now < tonumber(p[5]) then
      local ex = a == 't' and 'EX' or ''
      local v = tonumber(redis.call(ex .. 'HGET', key, p[3])) or 0
      local d = math.min(tonumber(p[4]), v)
      if d > 0 and d == v then
        redis.call(ex .. 'HDEL', key, p[3])
      elseif d > 0 then
        redis.call(ex .. 'HINCRBY', key, p[3], string.format('%d', -d))
        if a == 't' then
          redis.call('EXHPEXPIREAT', key, p[3], string.format('%d', math.floor(tonumber(p[5]) / 1000) - 1))
        end
      end
    end
  elseif a == 'x' then
    -- The TAT is ns since the epoch: too long for a double, so it is
    -- split into seconds and nanoseconds.
    local v = redis.pcall('GET', key) -- a table for another type
    if type(v) == 'string' and #v > 9 and tatok(v) then
      local inc = tonumber(p[3])
      local sec = tonumber(string.sub(v, 1, -10)) - math.floor(inc / 1e9)
      local ns = tonumber(string.sub(v, -9)) - inc % 1e9
      if ns < 0 then ns, sec = ns + 1e9, sec - 1 end
      local left = (sec - math.floor(now / 1e6)) * 1e6 + (ns / 1000 - now % 1e6) -- µs
      local was = left + inc / 1000
      if was > 0 then
        if left > 0 then
          redis.call('SET', key, string.format('%d%09d', sec, ns), 'PX', string.format('%d', math.ceil(left / 1000)))
        else
          redis.call('DEL', key)
        end
      end
    end
  elseif a == 'l' then
    local m = {}
    for w in string.gmatch(p[3], '[^,]+') do m[#m + 1] = w end
    chunked('ZREM', key, m, 1, 1)
  elseif a == 'g' then
    -- Integers throughout: the TAT and the increment c*T are whole µs.
    local v = redis.pcall('GET', key)
    if type(v) == 'string' and tatok(v) and #v <= 16 then
      local tat = tonumber(v)
      if tat > now then
        tat = tat - tonumber(p[3])
        if tat > now then
          redis.call('SET', key, string.format('%d', tat), 'PX', string.format('%d', math.ceil((tat - now) / 1000)))
        else
          redis.call('DEL', key)
        end
      end
    end
  end
end

local function entries(v)
  -- Splits a hold value into its expiry (µs) and its entries.
  local exp = tonumber(string.match(v, '^(%d+)'))
  local list = {}
  for line in string.gmatch(v, '\n([^\n]+)') do list[#list + 1] = line end
  return exp, list
end

local function entrykey(line)
  return string.match(line, '^%a (%S+)')
end
