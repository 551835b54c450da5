-- holds.lua: reservations ("holds" in the scripts). A hold is one field of
-- the reservation hash:
--   field = hold id
--   value = "<lapse µs>" followed by one "\n<entry>" per rule, where an
--           entry gives back what the reservation took from one key:
--     "F <key> <tag> <window end ms> <cost>"        packed fixed window
--     "S <key> <tag> <cell> <cost> <dies µs>"       packed sliding window
--     "G <key> <tag> <TAT increment µs>"            packed GCRA
--     "l <key> <member>,<member>,..."               sliding log members
--     "t <key> <cell field> <cost> <dies µs>"       TairHash cell
--     "h <key> <cell field> <cost> <dies µs>"       native-expiry hash cell
--     "x <key> <TAT increment ns>"                  redis-cell GCRA
--   and, written before the packed layout (one key per rule) and refunded
--   the same way until they lapse: "f <key> <window end ms> <cost>",
--   "s <key> <cell field> <cost> <dies µs>", "g <key> <TAT increment µs>".
-- Keys and tags never contain bytes below 0x21, so spaces and newlines
-- separate.
--
-- refund(entry, now) applies one entry's refund. It never drives a count
-- below zero and skips state that has moved on: a window that ended, a
-- cell that no longer counts (now >= dies), log members already trimmed,
-- a TAT already in the past.

local function refund(e, now)
  local p = {}
  for w in string.gmatch(e, '%S+') do p[#p + 1] = w end
  local a, key = p[1], p[2]
  if a == 'F' then
    fixedRefund(key, p[3], tonumber(p[4]), tonumber(p[5]))
  elseif a == 'S' then
    slidingRefund(key, p[3], tonumber(p[4]), tonumber(p[5]), tonumber(p[6]), now)
  elseif a == 'G' then
    gcraRefund(key, p[3], tonumber(p[4]), now)
  elseif a == 'l' then
    local m = {}
    for w in string.gmatch(p[3], '[^,]+') do m[#m + 1] = w end
    chunked('ZREM', key, m, 1, 1)
  elseif a == 't' then
    modslidingRefund('EX', key, p[3], tonumber(p[4]), tonumber(p[5]), now)
  elseif a == 'h' or a == 's' then
    modslidingRefund('', key, p[3], tonumber(p[4]), tonumber(p[5]), now)
  elseif a == 'x' then
    cellRefund(key, tonumber(p[3]), now)
  elseif a == 'f' then
    if redis.call('PEXPIRETIME', key) == tonumber(p[3]) then
      local v = tonumber(redis.pcall('GET', key)) or 0
      local d = math.min(tonumber(p[4]), v)
      if d > 0 then redis.call('DECRBY', key, fmt(d)) end
    end
  elseif a == 'g' then
    local v = redis.pcall('GET', key)
    if type(v) == 'string' and tatok(v) and #v <= 16 then
      local tat = tonumber(v)
      if tat > now then
        tat = tat - tonumber(p[3])
        if tat > now then
          redis.call('SET', key, fmt(tat), 'PX', fmt(math.ceil((tat - now) / 1000)))
        else
          redis.call('DEL', key)
        end
      end
    end
  end
end

local function entries(v)
  -- Splits a hold value into its lapse time (µs) and its entries.
  local exp = tonumber(string.match(v, '^(%d+)'))
  local list = {}
  for line in string.gmatch(v, '\n([^\n]+)') do list[#list + 1] = line end
  return exp, list
end

local function entrykey(line)
  return string.match(line, '^%a (%S+)')
end

-- markKey sets the hold marker of the packed value at key to lapse (ms),
-- or removes it (lapse nil); a missing key gets none (it would have no
-- TTL).
local function markKey(key, lapse)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then return end
  local m = unpackv(v)
  if not m then return end
  m[MARK] = nil
  local ours = {}
  if lapse then ours[1] = {MARK, lapse, ''} end
  redis.call('SET', key, (packv(v, m, ours, 0)), 'KEEPTTL')
end

-- lapse gives back the units of the lapsed holds in hkey on the keys this
-- attempt names (x.key(1..nk)), and sets the hold marker of each packed
-- value and log it read (x.vals, x.logs) to the earliest lapse of the
-- holds still open with units there.
local function lapse(x, hkey, nk, now)
  local h = redis.call('HGETALL', hkey)
  local named = {}
  for k = 1, nk do named[x.key(k)] = k end
  local soon = {}
  for i = 1, #h, 2 do
    local exp, list = entries(h[i + 1])
    if exp <= now then
      local rest = {}
      for _, e in ipairs(list) do
        if named[entrykey(e)] then refund(e, now) else rest[#rest + 1] = e end
      end
      if #rest == 0 then
        redis.call('HDEL', hkey, h[i])
      elseif #rest < #list then
        redis.call('HSET', hkey, h[i], fmt(exp) .. '\n' .. table.concat(rest, '\n'))
      end
    else
      local ms = math.ceil(exp / 1000)
      for _, e in ipairs(list) do
        local k = named[entrykey(e)]
        if k and (not soon[k] or ms < soon[k]) then soon[k] = ms end
      end
    end
  end
  for k, m in pairs(x.vals) do
    if m[MARK] or soon[k] then markKey(x.key(k), soon[k]) end
  end
  for k, lg in pairs(x.logs) do
    if lg.mark or soon[k] then logMark(x.key(k), lg, soon[k]) end
  end
end
