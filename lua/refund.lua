-- refund.lua: shared prelude, prepended to take.lua and settle.lua (see
-- lua.go); it is not run on its own and uses no KEYS or ARGV itself.
--
-- A hold (reservation) is stored as one field of the hold hash:
--   field = hold id
--   value = "<expiry µs>" followed by one "\n<entry>" per rule, where an
--           entry gives back what the reservation took from one key:
--     "f <key> <window end ms> <cost>"          fixed window counter
--     "s <key> <cell field> <cost> <dies µs>"   sliding window cell
--     "l <key> <member>,<member>,..."           sliding log members
--     "g <key> <TAT increment µs>"              GCRA
-- Keys never contain bytes below 0x21, so spaces and newlines separate.
--
-- refund(entry, now) applies one entry's refund. It never drives a count
-- below zero and skips state that has moved on: a fixed window that ended
-- (PEXPIRETIME differs), a cell that left the window, log members already
-- trimmed, a GCRA TAT already in the past.

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
  elseif a == 's' then
    if now < tonumber(p[5]) then
      local v = tonumber(redis.call('HGET', key, p[3])) or 0
      local d = math.min(tonumber(p[4]), v)
      if d > 0 then
        if d == v then
          redis.call('HDEL', key, p[3])
        else
          redis.call('HINCRBY', key, p[3], string.format('%d', -d))
        end
      end
    end
  elseif a == 'l' then
    local m = {}
    for w in string.gmatch(p[3], '[^,]+') do m[#m + 1] = w end
    chunked('ZREM', key, m, 1, 1)
  elseif a == 'g' then
    local v = redis.call('GET', key)
    if v then
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
