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
-- shape (backends/redis/storage.go, ruleTag), so a changed rule starts afresh under a new
-- tag. An entry whose tag the request does not name is copied unchanged
-- while its expiry lies ahead and dropped after that: a rule removed from
-- the policy costs memory until its state would have expired anyway, and
-- two versions of a policy running side by side (a rolling deploy) never
-- erase each other's counts. Payloads (numbers as '<I7', exact below
-- 2^53) are the algorithm fragments' business. The tag MARK is the hold
-- marker: its "expiry" is the earliest lapse (ms, rounded down) of the
-- reservations with units in this key, so a decision reads the
-- reservations only when one may have lapsed (take.lua).
--
-- Nested sets (docs/DESIGN.md, "One key per subject"): a dimension set
-- whose key extends the subject's root set's (the set of the shard
-- dimensions alone, its key ending in '=') keeps its value as a SECTION,
-- one entry of the root's value: tag and the 4 bytes after it, the set's
-- 8-byte id (sectid of its key: a tag's first byte >= 128, never a
-- rule's or MARK's), expiry the latest of its entries', payload the id's
-- last 4 bytes then the set's own value without FMT. Code that reads a
-- section gets the set's value as if it were stored alone (sectv); a
-- root value rewritten keeps the sections it does not replace while
-- their expiry lies ahead (packv). Reservations name a nested set by
-- its VKEY, the root's key, '%n', then the rest of the set's key (the
-- sdk escapes '%' as %XX: no key it builds holds '%n'). A root whose
-- value would pass WIDEAT bytes keeps its sections in a hash beside it
-- instead (wide, below; docs/DESIGN.md, "Wide subjects").

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
-- upper-case tokens are written in by lua.go from
-- internal/lua/tokens.go.

local FMT = '\1'
-- FOREIGN ends the error for a state key holding a value freqcap did not
-- write ('freqcap: rule <name>' .. FOREIGN); TRAIL formats a denial-trail
-- entry (at µs, policy, rule, used, limit, cost, retry µs, flags:
-- TRAIL_TOOHIGH, TRAIL_SHADOW, TRAIL_OVERRIDE (a block override: the rule
-- field is then its ID); every number with '%d', a number or a numeral
-- string), then TRAILSEP and the values (take.lua's header): TRAILENT,
-- declared with the flags in internal/lua/tokens.go, which Go's trail
-- writer and parser use too.
local FOREIGN = ': its state key holds a value freqcap did not write' .. UNTOUCHED
local TRAIL = TRAILENT
local MARK = '\0\0\0\0'
-- A sliding log's hold marker is the member '!<lapse ms>' scored BIG:
-- above every timestamp, so counts and trims (scores below BIG) skip it.
local BIG = '1152921504606846976' -- 2^60
local BELOW = '(' .. BIG -- ZCOUNT's and ZRANGEBYSCORE's bound below BIG

-- pushTrail writes a denial's trail entries ent (TRAIL, newest last) to
-- the list at key, newest first, keeps its newest max (LTRIM only once it
-- holds more) and sets its expiry to at, in ms since the epoch: now (the
-- script's TIME) plus the trail's TTL (take.lua and fast.lua.tmpl).
-- PEXPIREAT, not PEXPIRE: Redis propagates a relative expiry as
-- PEXPIREAT, rewriting the command's arguments on every call.
local function pushTrail(key, ent, max, at)
  if redis.call('LPUSH', key, unpack(ent)) > max then redis.call('LTRIM', key, 0, max - 1) end
  redis.call('PEXPIREAT', key, at)
end

-- unpackv parses a packed value: tag -> the entry's start, and at [0]
-- the list of its sections' starts (nested sets), if any. No value (nil
-- or false) is an empty map; anything freqcap did not write gives nil.
-- struct.unpack(HDR, v, start) reads an entry's tag, payload length,
-- expiry and payload start.
local function unpackv(v)
  local m = {}
  if not v then return m end
  local n = #v
  local f = string.sub(v, 1, 1)
  if n == 0 or (f ~= FMT and f ~= WIDEFMT) then return nil end
  local p = 2
  while p <= n do
    if p + 12 > n then return nil end
    local tag, len, _, q = struct.unpack(HDR, v, p)
    if q + len - 1 > n then return nil end
    if string.byte(tag, 1) < 128 then
      m[tag] = p
    elseif len < 4 then
      return nil
    else
      local s = m[0]
      if not s then
        s = {}
        m[0] = s
      end
      s[#s + 1] = p
    end
    p = q + len
  end
  if f == WIDEFMT and (m[0] or not m[WIDETAG]) then return nil end
  return m
end

-- packv builds a packed value from ours, a list of whole entries (each
-- starting with its tag), and the entries of m (parsed from v) whose tag
-- ours lacks and whose expiry is after nowms (and the hold marker),
-- copied verbatim; then the sections of secs (nil, or id -> the section
-- that replaces the one of that id, false: none), then v's other
-- sections whose expiry is after nowms. top is the latest expiry of
-- ours; packv returns the value and the latest expiry in it (the key's
-- PXAT). A wide root's marker copied (WIDETAG: not in ours) keeps the
-- value wide (WIDEFMT).
local function packv(v, m, ours, top, nowms, secs)
  if next(m) == nil and not secs then return FMT .. table.concat(ours), top end
  local n = #ours
  local seen, f = {}, FMT
  for k = 1, n do seen[string.sub(ours[k], 1, 4)] = true end
  for tag, p in pairs(m) do
    if tag ~= 0 and not seen[tag] then
      local _, len, exp, q = struct.unpack(HDR, v, p)
      if exp > nowms or tag == MARK then -- a marker goes only when holds.lua says
        n = n + 1
        ours[n] = string.sub(v, p, q + len - 1)
        if exp > top then top = exp end
        if tag == WIDETAG then f = WIDEFMT end
      end
    end
  end
  if secs then
    for _, s in pairs(secs) do
      if s then
        local _, _, exp = struct.unpack(HDR, s, 1)
        n = n + 1
        ours[n] = s
        if exp > top then top = exp end
      end
    end
  end
  local ss = m[0]
  if ss then
    for k = 1, #ss do
      local tag, len, exp, q = struct.unpack(HDR, v, ss[k])
      if exp > nowms and not (secs and secs[tag .. string.sub(v, q, q + 3)] ~= nil) then
        n = n + 1
        ours[n] = string.sub(v, ss[k], q + len - 1)
        if exp > top then top = exp end
      end
    end
  end
  return f .. table.concat(ours), top
end

-- sectid returns the 8-byte id of the nested set at key (its section's
-- tag, then the first 4 bytes of its payload): the first 8 bytes of the
-- SHA-1 of key, the first byte's high bit set (backends/redis's
-- sectionID).
local function sectid(key)
  local h = redis.sha1hex(key)
  return struct.pack('>I4I4', tonumber(string.sub(h, 1, 8), 16) % 2147483648 + 2147483648, tonumber(string.sub(h, 9, 16), 16))
end

-- sectv returns the value of the nested set of id, as if stored alone,
-- from the root value v (m: unpackv's), or false when v has no such
-- section.
local function sectv(v, m, id)
  local s = m[0]
  if not s then return false end
  local tag, ext = string.sub(id, 1, 4), string.sub(id, 5, 8)
  for k = 1, #s do
    local t, len, _, q = struct.unpack(HDR, v, s[k])
    if t == tag and string.sub(v, q, q + 3) == ext then return FMT .. string.sub(v, q + 4, q + len - 1) end
  end
  return false
end

-- section returns the section of the nested set of id whose value (as if
-- stored alone) is sv and whose latest expiry is top, or false when sv
-- holds no entry.
local function section(id, sv, top)
  if #sv <= 1 then return false end
  return struct.pack(HDR, string.sub(id, 1, 4), #sv + 3, top) .. string.sub(id, 5, 8) .. string.sub(sv, 2)
end

-- wide returns the helpers of wide roots (docs/DESIGN.md, "Wide
-- subjects"; internal/lua/tokens.go's WideAt), built only where a script
-- meets one: get and root. A wide root's value starts with WIDEFMT and
-- holds its own entries and the wide marker (tag WIDETAG, payload: the
-- mode, WIDE_HFE or WIDE_SWEEP, then the sweep's HSCAN cursor; expiry:
-- the latest of its hash's fields, the hash key's PEXPIREAT); its
-- sections are the fields of the hash at its key plus WIDESUFFIX, field =
-- the section's id, value = the section's bytes. The hash key, its
-- fields (WIDE_HFE) and the wide root's key expire EXPSLACK ms after
-- what they hold stops mattering: a key's expiry set to an instant the
-- server's clock has passed deletes it at once, and the clock goes on
-- during a script that decides many attempts at one TIME.
local function wide(nowms)
  -- get returns the value of the nested set of id, as if stored alone
  -- (sectv's), from the wide hash at hkey: false when it has no such
  -- field, '' (which unpackv refuses) for a field freqcap did not write.
  -- A field is the section, then its trailer if named (WIDETRAIL: when it
  -- was last written, ms; then the value's name).
  local function get(hkey, id)
    local s = redis.call('HGET', hkey, id)
    if not s then return false end
    if #s < HDRLEN + 4 then return '' end
    local _, len, _, q = struct.unpack(HDR, s, 1)
    local e = q + len - 1
    if e ~= #s and e + WIDETRAILLEN > #s then return '' end
    return FMT .. string.sub(s, q + 4, e)
  end

  -- root writes, at key, the root whose value v parsed as m, with ours
  -- (its new entries, whose latest expiry is top) and secs (id -> its
  -- nested set's new section, false: none; names: id -> its value's name,
  -- written in its field's trailer), the sections kept in the
  -- hash at hkey: a wide root's go there; a narrow root's value goes
  -- wide when it would pass WIDEAT bytes, all its live sections moving
  -- into the hash (emptied first: a field left by an earlier wide time
  -- of the root would be read as live); else it is written as packv
  -- builds it. hfe: the server has HPEXPIREAT, which a root going wide
  -- now uses (WIDE_HFE) for its fields' expiry; else (WIDE_SWEEP) each
  -- write that adds a field removes the dead fields among the next
  -- WIDESWEEP of an HSCAN whose cursor the marker keeps (a write that
  -- only rewrites fields sweeps nothing: the hash does not grow).
  -- decl: a nested set of the root is declared wide (driver.Rule.Wide):
  -- the root goes wide with its first section, whatever its length.
  local function root(key, hkey, v, m, ours, top, secs, hfe, names, decl)
    local mode, cur, wtop = WIDE_SWEEP, '0', 0
    local wp = m[WIDETAG]
    if wp then
      local _, len, exp, q = struct.unpack(HDR, v, wp)
      mode, cur, wtop = string.sub(v, q, q), string.sub(v, q + 1, q + len - 1), exp
    else
      local nv, ntop = packv(v, m, {unpack(ours)}, top, nowms, secs)
      local all, any = {}, false
      if decl or #nv > WIDEAT then
        for _, sp in ipairs(m[0] or {}) do
          local tag, len, exp, q = struct.unpack(HDR, v, sp)
          local id = tag .. string.sub(v, q, q + 3)
          if exp > nowms and secs[id] == nil then all[id], any = string.sub(v, sp, q + len - 1), true end
        end
        for id, s in pairs(secs) do
          all[id] = s
          any = any or s ~= false
        end
      end
      if not any then
        if ntop > 0 then redis.call('SET', key, nv, 'PXAT', sf('%d', ntop)) end
        return
      end
      secs = all
      if hfe then mode = WIDE_HFE end
      redis.call('DEL', hkey)
    end
    local hs, hd, grew = {}, {}, false
    for id, s in pairs(secs) do
      if s then
        local _, _, exp = struct.unpack(HDR, s, 1)
        local nm = names and names[id]
        hs[#hs + 1], hs[#hs + 2] = id, nm and s .. struct.pack(WIDETRAIL, nowms) .. nm or s
        if exp > wtop then wtop = exp end
        if #hs >= 200 then
          grew = redis.call('HSET', hkey, unpack(hs)) > 0 or grew
          hs = {}
        end
      else
        hd[#hd + 1] = id
      end
    end
    if #hs > 0 then grew = redis.call('HSET', hkey, unpack(hs)) > 0 or grew end
    if #hd > 0 then redis.call('HDEL', hkey, unpack(hd)) end
    if mode == WIDE_HFE then
      for id, s in pairs(secs) do
        if s then
          local _, _, exp = struct.unpack(HDR, s, 1)
          redis.call('HPEXPIREAT', hkey, sf('%d', exp + EXPSLACK), 'FIELDS', 1, id)
        end
      end
    elseif grew then -- a new field: the sweep's turn
      local r = redis.call('HSCAN', hkey, cur, 'COUNT', WIDESWEEP)
      local kv, dead = r[2], {}
      cur = r[1]
      for k = 1, #kv, 2 do
        local f = kv[k + 1]
        if secs[kv[k]] == nil and #f >= HDRLEN then
          local _, _, exp = struct.unpack(HDR, f, 1)
          if exp <= nowms then dead[#dead + 1] = kv[k] end
        end
      end
      if #dead > 0 then redis.call('HDEL', hkey, unpack(dead)) end
    end
    if wtop > nowms then redis.call('PEXPIREAT', hkey, sf('%d', wtop + EXPSLACK)) end
    local keep = {}
    for tag, p in pairs(m) do
      if tag ~= 0 and tag ~= WIDETAG then keep[tag] = p end
    end
    ours[#ours + 1] = struct.pack(HDR, WIDETAG, 1 + #cur, wtop) .. mode .. cur
    if wtop > top then top = wtop end
    local nv, ntop = packv(v, keep, ours, top, nowms)
    redis.call('SET', key, WIDEFMT .. string.sub(nv, 2), 'PXAT', sf('%d', ntop + EXPSLACK))
  end

  return {get = get, root = root}
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
-- driver.Request.OverrideKey: ID, value, …; backends/redis/storage.go's
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
