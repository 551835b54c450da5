-- prelude.lua: what every script of the Redis backend shares (lua.go puts
-- it first): the packed value's codec and small helpers. It uses no KEYS
-- or ARGV itself. Every function here is created on each run of a script
-- (Lua makes a closure per definition per run), so this file holds only
-- what the common paths need; the reservations' code is built on demand
-- (holds.lua) and the algorithms' code is pasted inline (alg/).
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
-- shape (wire.go, ruleTag), so a changed rule starts afresh under a new
-- tag. An entry whose tag the request does not name is copied unchanged
-- while its expiry lies ahead and dropped after that: a rule removed from
-- the policy costs memory until its state would have expired anyway, and
-- two versions of a policy running side by side (a rolling deploy) never
-- erase each other's counts. Payloads (numbers as '<I7', exact below
-- 2^53) are the algorithm fragments' business. The tag MARK is the hold
-- marker: its "expiry" is the earliest lapse (ms, rounded down) of the
-- reservations with units in this key, so a decision reads the
-- reservations only when one may have lapsed (take.lua).

-- sf('%d', n) is how a script writes an integer as text, exact to 2^53
-- (the bounds keep every number below it): tostring(n) and n .. '' write
-- a number as '%.14g', 1e+14 for 10^14 and 1.1258999068426e+15 for
-- MaxLimit. Every number a script writes goes through a '%d' of sf (or
-- TRAIL), or struct.pack; redis.call converts a number argument itself,
-- exactly when it is an integer.
local sf = string.format
-- HA and RA (the ARGV per attempt header and per rule, take.lua), HDR
-- (the packed entry's header, struct format), REC and RECHDR (an
-- idempotency record's first byte and header, take.lua) and the other
-- upper-case wire tokens are written in by lua.go from
-- internal/lua/wire.go.

local FMT = '\1'
-- FOREIGN ends the error for a state key holding a value freqcap did not
-- write ('freqcap: rule <name>' .. FOREIGN); TRAIL formats a denial-trail
-- entry (at µs, policy, rule, used, limit, cost, retry µs, flags: 1 cost
-- too high, 2 shadow, 4 override block (then the rule field is the
-- override's ID); every number with '%d', a number or a numeral string),
-- then "|values" (take.lua's header; backends/redis/wire.go owns it).
local FOREIGN = ': its state key holds a value freqcap did not write' .. UNTOUCHED
local TRAIL = '%d|%s|%s|%d|%d|%d|%d|%d'
local MARK = '\0\0\0\0'
-- A sliding log's hold marker is the member '!<lapse ms>' scored BIG:
-- above every timestamp, so counts and trims (scores below BIG) skip it.
local BIG = '1152921504606846976' -- 2^60
local BELOW = '(' .. BIG -- ZCOUNT's and ZRANGEBYSCORE's bound below BIG

-- pushTrail writes a denial's trail entries ent (TRAIL, newest last) to
-- the list at key, newest first, keeps its newest max (LTRIM only once it
-- holds more) and sets its TTL, ttl ms (take.lua and fast.lua.tmpl).
local function pushTrail(key, ent, max, ttl)
  if redis.call('LPUSH', key, unpack(ent)) > max then redis.call('LTRIM', key, 0, max - 1) end
  redis.call('PEXPIRE', key, ttl)
end

-- unpackv parses a packed value: tag -> the entry's start. No value (nil
-- or false) is an empty map; anything freqcap did not write gives nil.
-- struct.unpack(HDR, v, start) reads an entry's tag, payload length,
-- expiry and payload start.
local function unpackv(v)
  local m = {}
  if not v then return m end
  local n = #v
  if n == 0 or string.sub(v, 1, 1) ~= FMT then return nil end
  local p = 2
  while p <= n do
    if p + 12 > n then return nil end
    local tag, len, _, q = struct.unpack(HDR, v, p)
    if q + len - 1 > n then return nil end
    m[tag] = p
    p = q + len
  end
  return m
end

-- packv builds a packed value from ours, a list of whole entries (each
-- starting with its tag), and the entries of m (parsed from v) whose tag
-- ours lacks and whose expiry is after nowms (and the hold marker),
-- copied verbatim. top is the
-- latest expiry of ours; packv returns the value and the latest expiry in
-- it (the key's PXAT).
local function packv(v, m, ours, top, nowms)
  if next(m) == nil then return FMT .. table.concat(ours), top end
  local n = #ours
  local seen = {}
  for k = 1, n do seen[string.sub(ours[k], 1, 4)] = true end
  for tag, p in pairs(m) do
    if not seen[tag] then
      local _, len, exp, q = struct.unpack(HDR, v, p)
      if exp > nowms or tag == MARK then -- a marker goes only when holds.lua says
        n = n + 1
        ours[n] = string.sub(v, p, q + len - 1)
        if exp > top then top = exp end
      end
    end
  end
  return FMT .. table.concat(ours), top
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

-- overrides parses a subject's overrides h (HGETALL of
-- driver.Request.OverrideKey: ID, value, …; backends/redis/wire.go's
-- format, of which it reads "<kind>|<counted>|<until µs>|<created µs>|
-- <limits>|") and returns the live ones (until 0 or after now) that
-- decide: the latest block {ID, value, until}, the latest exempt {ID,
-- value, counted}, and per rule name the latest limit {ID, limit,
-- value} (nil for none of a kind).
local function overrides(h, now)
  local blk, ex, lims
  for k = 1, #h, 2 do
    local id = tonumber(h[k])
    local kd, cn, un, lm = string.match(h[k + 1], '^(%a)|(%d)|(%d+)|%d+|([^|]*)|')
    if id and kd and (un == '0' or tonumber(un) > now) then
      if kd == 'b' then
        if not blk or id > blk[1] then blk = {id, h[k + 1], tonumber(un)} end
      elseif kd == 'e' then
        if not ex or id > ex[1] then ex = {id, h[k + 1], cn == '1'} end
      elseif kd == 'l' then
        lims = lims or {}
        for nm, lv in string.gmatch(lm, '([^,=]+)=(%d+)') do
          local cur = lims[nm]
          if not cur or id > cur[1] then lims[nm] = {id, tonumber(lv), h[k + 1]} end
        end
      end
    end
  end
  return blk, ex, lims
end

-- gcraRate returns a GCRA rule's emission interval and tolerance (µs)
-- under a limit override of lv per window w µs, its reported limit L
-- (burst+1) kept: driver.Rule.GCRAParams' T = floor(w/lv), at least 1,
-- and T*L, bounded at 2^52 µs.
local function gcraRate(w, lv, L)
  local T = w / lv
  T = T - T % 1
  if T < 1 then T = 1 end
  local tol = T * L
  if tol > 4503599627370496 then tol = 4503599627370496 end
  return T, tol
end

-- mods returns nsup and tatok, the module paths' helpers, built only
-- where they are used.
local function mods()
  -- nsup turns a redis-cell TAT (ns since the epoch, an integer string too
  -- long for a double) into µs, rounded up.
  local function nsup(tv)
    local us = tonumber(string.sub(tv, 1, -4)) or 0
    if string.sub(tv, -3) ~= string.rep('0', math.min(#tv, 3)) then us = us + 1 end
    return us
  end

  -- tatok reports whether tv is a TAT as take.lua and CL.THROTTLE write it:
  -- 1 to 19 decimal digits, no sign, at most 2^63-1. CL.THROTTLE parses its
  -- key as an unsigned 64-bit integer and aborts the server on anything else
  -- ("", "abc", "-5", "+5" is accepted but never written, 20 digits); its
  -- arithmetic is in signed 64-bit ns.
  local function tatok(tv)
    local n = #tv
    return n >= 1 and n <= 19 and not string.find(tv, '%D') and (n < 19 or tv <= '9223372036854775807')
  end
  return nsup, tatok
end
