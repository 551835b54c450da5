-- prelude.lua: what every script of the Redis backend shares (lua.go puts
-- it first): the packed value's codec and small helpers. It uses no KEYS
-- or ARGV itself.
--
-- The packed layout (docs/DESIGN.md, "Redis layout"): the fixed-window,
-- calendar, sliding-window and GCRA rules of one request that share their
-- dimensions keep their state in ONE string key (driver.Rule.Group):
--
--   value = FMT (one byte, the format version) then entries
--   entry = struct '<c4I3I6': tag (4 bytes), payload length, expiry (Unix
--           ms: when the entry stops mattering), then the payload
--
-- A tag is 4 bytes the backend derives from the rule's name and state
-- shape (specs.go), so a changed rule starts afresh under a new tag. An
-- entry whose tag the request does not name is copied unchanged while
-- its expiry lies ahead and dropped after that: a rule removed from the
-- policy costs memory until its state would have expired anyway, and two
-- versions of a policy running side by side (a rolling deploy) never
-- erase each other's counts. Payloads (numbers as '<I7', exact below
-- 2^53) are the algorithm fragments' business. The tag MARK is the hold
-- marker: its expiry is the earliest lapse of the reservations with units
-- in this key, so a decision reads the reservations only when one may
-- have lapsed (take.lua).

local FMT = 1
local HDR = '<c4I3I6'
local MARK = '\0\0\0\0'
-- A sliding log's hold marker is the member '!<lapse ms>' scored BIG:
-- above every timestamp, so counts and trims (scores below BIG) skip it.
local BIG = '1152921504606846976' -- 2^60

-- unpackv parses a packed value: tag -> {payload start, payload length,
-- expiry ms, entry start}. No value (nil or false) is an empty map;
-- anything freqcap did not write gives nil.
local function unpackv(v)
  local m = {}
  if not v then return m end
  local n = #v
  if n == 0 or string.byte(v, 1) ~= FMT then return nil end
  local p = 2
  while p <= n do
    if p + 12 > n then return nil end
    local tag, len, exp, q = struct.unpack(HDR, v, p)
    if q + len - 1 > n then return nil end
    m[tag] = {q, len, exp, p}
    p = q + len
  end
  return m
end

-- packv builds a packed value from ours, a list of {tag, expiry ms,
-- payload}, and the entries of m (parsed from v) whose tag ours lacks and
-- whose expiry is after nowms, copied verbatim. It returns the value and
-- the latest expiry in it (the key's PXAT).
local function packv(v, m, ours, nowms)
  local parts, seen, top = {string.char(FMT)}, {}, 0
  for _, e in ipairs(ours) do
    parts[#parts + 1] = struct.pack(HDR, e[1], #e[3], e[2]) .. e[3]
    seen[e[1]] = true
    if e[2] > top then top = e[2] end
  end
  for tag, e in pairs(m) do
    if not seen[tag] and e[3] > nowms then
      parts[#parts + 1] = string.sub(v, e[4], e[1] + e[2] - 1)
      if e[3] > top then top = e[3] end
    end
  end
  return table.concat(parts), top
end

-- ints reads k '<I7' numbers of v from position p: a list.
local function ints(v, p, k)
  if k == 0 then return {} end
  if k <= 64 then
    local t = {struct.unpack('<' .. string.rep('I7', k), v, p)}
    t[k + 1] = nil -- the position after them
    return t
  end
  local t = {}
  for q = 1, k do t[q] = struct.unpack('<I7', v, p + (q - 1) * 7) end
  return t
end

-- pints packs a list of numbers as '<I7' each.
local function pints(list)
  local k = #list
  if k == 0 then return '' end
  if k <= 64 then return struct.pack('<' .. string.rep('I7', k), unpack(list)) end
  local parts = {}
  for q = 1, k do parts[q] = struct.pack('<I7', list[q]) end
  return table.concat(parts)
end

-- patch rewrites the entry tagged tag of the packed value at key (which
-- must exist) with f(v, e) -> expiry, payload, or drops it when f returns
-- nil; the key keeps its TTL. No entry, or a value freqcap did not write:
-- nothing happens.
local function patch(key, tag, f)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then return end
  local m = unpackv(v)
  if not m or not m[tag] then return end
  local exp, payload = f(v, m[tag])
  m[tag] = nil
  local ours = {}
  if exp then ours[1] = {tag, exp, payload} end
  redis.call('SET', key, (packv(v, m, ours, 0)), 'KEEPTTL')
end

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

-- fdiv is floor(a/b) for integers a and b > 0 held exactly (|a|, b <
-- 2^53): the double quotient, corrected by one where rounding carried it
-- across an integer.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function fmt(n) return string.format('%d', n) end
