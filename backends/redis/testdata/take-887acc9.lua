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
-- sdk escapes '%' as %XX: no key it builds holds '%n').

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
local FOREIGN = ': its state key holds a value freqcap did not write' .. '; not evaluated, nothing written (delete the key or reset the subject)'
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

-- unpackv parses a packed value: tag -> the entry's start, and at [0]
-- the list of its sections' starts (nested sets), if any. No value (nil
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
    local tag, len, _, q = struct.unpack('<c4I3I6', v, p)
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
  return m
end

-- packv builds a packed value from ours, a list of whole entries (each
-- starting with its tag), and the entries of m (parsed from v) whose tag
-- ours lacks and whose expiry is after nowms (and the hold marker),
-- copied verbatim; then the sections of secs (nil, or id -> the section
-- that replaces the one of that id, false: none), then v's other
-- sections whose expiry is after nowms. top is the latest expiry of
-- ours; packv returns the value and the latest expiry in it (the key's
-- PXAT).
local function packv(v, m, ours, top, nowms, secs)
  if next(m) == nil and not secs then return FMT .. table.concat(ours), top end
  local n = #ours
  local seen = {}
  for k = 1, n do seen[string.sub(ours[k], 1, 4)] = true end
  for tag, p in pairs(m) do
    if tag ~= 0 and not seen[tag] then
      local _, len, exp, q = struct.unpack('<c4I3I6', v, p)
      if exp > nowms or tag == MARK then -- a marker goes only when holds.lua says
        n = n + 1
        ours[n] = string.sub(v, p, q + len - 1)
        if exp > top then top = exp end
      end
    end
  end
  if secs then
    for _, s in pairs(secs) do
      if s then
        local _, _, exp = struct.unpack('<c4I3I6', s, 1)
        n = n + 1
        ours[n] = s
        if exp > top then top = exp end
      end
    end
  end
  local ss = m[0]
  if ss then
    for k = 1, #ss do
      local tag, len, exp, q = struct.unpack('<c4I3I6', v, ss[k])
      if exp > nowms and not (secs and secs[tag .. string.sub(v, q, q + 3)] ~= nil) then
        n = n + 1
        ours[n] = string.sub(v, ss[k], q + len - 1)
        if exp > top then top = exp end
      end
    end
  end
  return FMT .. table.concat(ours), top
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
    local t, len, _, q = struct.unpack('<c4I3I6', v, s[k])
    if t == tag and string.sub(v, q, q + 3) == ext then return FMT .. string.sub(v, q + 4, q + len - 1) end
  end
  return false
end

-- section returns the section of the nested set of id whose value (as if
-- stored alone) is sv and whose latest expiry is top, or false when sv
-- holds no entry.
local function section(id, sv, top)
  if #sv <= 1 then return false end
  return struct.pack('<c4I3I6', string.sub(id, 1, 4), #sv + 3, top) .. string.sub(id, 5, 8) .. string.sub(sv, 2)
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

-- holds.lua: reservations ("holds" in the scripts), built on demand:
-- holds(now) returns their functions (refund, entries, entrykey, lapse,
-- logMark), so a decision that needs none of them does not pay for them.
--
-- A hold is one field of the reservation hash:
--   field = hold id
--   value = "<lapse µs>" followed by one "\n<entry>" per rule, where an
--           entry gives back what the reservation took from one key:
--     "F <key> <tag> <window end ms> <cost>"        packed fixed window
--     "S <key> <tag> <cell> <cost> <dies µs>"       packed sliding window
--     "G <key> <tag> <TAT increment µs> <TAT µs>"   packed GCRA (the TAT it stored)
--     "L <key> <tag> <at µs> <cost>"                packed sliding log
--     "l <key> <member>,<member>,..."               sorted-set log members
--     "t <key> <cell field> <cost> <dies µs>"       TairHash cell
--     "h <key> <cell field> <cost> <dies µs>"       native-expiry hash cell
--     "x <key> <TAT increment ns>"                  redis-cell GCRA
--   and, written by the one-key-per-rule layout and refunded the same way
--   until they lapse: "f <key> <window end ms> <cost>", "s <key> <cell
--   field> <cost> <dies µs>", "g <key> <TAT increment µs>".
-- Keys and tags never contain bytes below 0x21, so spaces and newlines
-- separate. A nested set's entries name its VKEY (prelude.lua).
--
-- refund(entry) applies one entry's refund. It never drives a count below
-- zero and skips state that has moved on: a window that ended, a cell
-- that no longer counts (now >= dies), log members already trimmed, a TAT
-- already in the past.

local function holds(now)
  -- put replaces the entry tagged tag of the packed value at key (which
  -- must exist; the key keeps its TTL) with the one fn returns, or drops
  -- it when fn returns nil: fn(v, payload length, expiry, payload start)
  -- -> expiry, payload, called with nothing (nil) when there is no such
  -- entry. A value freqcap did not write is left alone. key may be a
  -- nested set's VKEY (prelude.lua): the entry is its section's, which
  -- must exist, and the root's key is written.
  local function put(key, tag, fn)
    local rkey, ckey = key, nil
    local at = string.find(key, '%n', 1, true)
    if at then rkey, ckey = string.sub(key, 1, at - 1), string.sub(key, 1, at - 1) .. string.sub(key, at + 2) end
    local rv = redis.pcall('GET', rkey)
    if type(rv) ~= 'string' then return end
    local rm = unpackv(rv)
    if not rm then return end
    local v, m, id = rv, rm, nil
    if ckey then
      id = sectid(ckey)
      v = sectv(rv, rm, id)
      if not v then return end
      m = unpackv(v)
      if not m then return end
    end
    local nexp, payload
    if m[tag] then
      local _, len, exp, q = struct.unpack('<c4I3I6', v, m[tag])
      nexp, payload = fn(v, len, exp, q)
    else
      nexp, payload = fn()
      if not nexp then return end -- nothing there, nothing to add
    end
    m[tag] = nil
    local ours = {}
    if nexp then ours[1] = struct.pack('<c4I3I6', tag, #payload, nexp) .. payload end
    local nv, top = packv(v, m, ours, nexp or 0, 0)
    if ckey then nv = packv(rv, rm, {}, 0, 0, {[id] = section(id, nv, top)}) end
    redis.call('SET', rkey, nv, 'KEEPTTL')
  end

  -- patch rewrites (or drops) the entry tagged tag as put does; without
  -- such an entry nothing happens.
  local function patch(key, tag, fn)
    put(key, tag, function(v, ...)
      if v then return fn(v, ...) end
    end)
  end

  local function refund(e)
    local f = {}
    for w in string.gmatch(e, '%S+') do f[#f + 1] = w end
    local a, key = f[1], f[2]
    if a == 'F' then
      do
        -- "F <key> <tag> <window end ms> <cost>": c units back while the entry
        -- is of that window.
        local em, c = tonumber(f[4]), tonumber(f[5])
        patch(key, f[3], function(v, len, exp, q)
          if exp ~= em then return exp, string.sub(v, q, q + len - 1) end
          local used = struct.unpack('<I7', v, q)
          return exp, struct.pack('<I7', used - math.min(used, c))
        end)
      end
    elseif a == 'S' then
      do
        -- "S <key> <tag> <cell> <cost> <dies µs>": c units back to the cell
        -- while it counts (now < dies), and off the sum.
        local i, c, dies = tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
        if now < dies then
          patch(key, f[3], function(v, len, exp, q)
            local k = (len - 14) / 7
            local top, sum = struct.unpack('<I7I7', v, q)
            local list = ints(v, q + 14, k)
            local z = i - (top - k + 1) + 1
            if z >= 1 and z <= k then
              local d = math.min(list[z], c)
              list[z], sum = list[z] - d, sum - d
            end
            table.insert(list, 1, sum)
            table.insert(list, 1, top)
            return exp, pints(list)
          end)
        end
      end
    elseif a == 'G' then
      do
        -- "G <key> <tag> <TAT increment µs> <the TAT it stored, µs>": the part
        -- of the increment still ahead of now (at most the stored TAT - now:
        -- units that drained are not owed twice; a plan of an earlier version
        -- lacks the TAT) is taken off a TAT still ahead of now; an entry whose
        -- TAT falls to now or before is dropped. The memory backend's refund.
        local inc = tonumber(f[4])
        local rt = tonumber(f[5])
        if rt and rt - now < inc then inc = rt - now end
        if inc > 0 then patch(key, f[3], function(v, len, exp, q)
          local tat = struct.unpack('<I7', v, q)
          if tat <= now then return exp, string.sub(v, q, q + len - 1) end
          tat = tat - inc
          if tat <= now then return nil end
          return math.ceil(tat / 1000), struct.pack('<I7', tat)
        end) end
      end
    elseif a == 'L' then
      do
        -- "L <key> <tag> <at µs> <cost>": the record at at gives back up to cost
        -- units (it goes when it holds none), the later ones' counts down by as
        -- many; nothing when it was trimmed.
        local at, c = tonumber(f[4]), tonumber(f[5])
        patch(key, f[3], function(v, len, exp, q)
          local k = (len - 7) / 14
          local list = ints(v, q, 1 + 2 * k) -- base, then t and cum per record
          for z = 1, k do
            if list[2 * z] == at then
              local before = list[2 * z - 1]
              local d = math.min(c, list[2 * z + 1] - before)
              for y = z, k do list[2 * y + 1] = list[2 * y + 1] - d end
              if list[2 * z + 1] == before then
                table.remove(list, 2 * z + 1)
                table.remove(list, 2 * z)
              end
              break
            end
          end
          return exp, pints(list)
        end)
      end
    elseif a == 'l' then
      do
        -- "l <key> <member>,<member>,...": the members go.
        local m = {}
        for w in string.gmatch(f[3], '[^,]+') do m[#m + 1] = w end
        for k = 1, #m, 999 do redis.call('ZREM', key, unpack(m, k, math.min(#m, k + 998))) end
      end
    elseif a == 't' or a == 'h' or a == 's' then
      do
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
              redis.call('EXHPEXPIREAT', key, fld, sf('%d', math.floor(dies / 1000) - 1 + 1000))
            end
          end
        end
      end
    elseif a == 'x' then
      do
        -- "x <key> <TAT increment ns>": the TAT is ns since the epoch, too long
        -- for a double, so it is split into seconds and nanoseconds. A redis-cell
        -- key is only ever given an integer TAT or deleted.
        local nsup, tatok = mods()
        local tv = redis.pcall('GET', key) -- a table for another type
        if type(tv) == 'string' and #tv > 9 and tatok(tv) then
          local inc = tonumber(f[3])
          local sec = tonumber(string.sub(tv, 1, -10)) - math.floor(inc / 1e9)
          local ns = tonumber(string.sub(tv, -9)) - inc % 1e9
          if ns < 0 then ns, sec = ns + 1e9, sec - 1 end
          local left = (sec - math.floor(now / 1e6)) * 1e6 + (ns / 1000 - now % 1e6) -- µs
          if left + inc / 1000 > 0 then
            if left > 0 then
              redis.call('SET', key, sf('%d%09d', sec, ns), 'PX', sf('%d', math.ceil(left / 1000)))
            else
              redis.call('DEL', key)
            end
          end
        end
      end
    elseif a == 'f' then
      if redis.call('PEXPIRETIME', key) == tonumber(f[3]) then
        local u = tonumber(redis.pcall('GET', key)) or 0
        local d = math.min(tonumber(f[4]), u)
        if d > 0 then redis.call('DECRBY', key, sf('%d', d)) end
      end
    elseif a == 'g' then
      local tv = redis.pcall('GET', key)
      local _, tatok = mods()
      if type(tv) == 'string' and tatok(tv) and #tv <= 16 then
        local tat = tonumber(tv)
        if tat > now then
          tat = tat - tonumber(f[3])
          if tat > now then
            redis.call('SET', key, sf('%d', tat), 'PX', sf('%d', math.ceil((tat - now) / 1000)))
          else
            redis.call('DEL', key)
          end
        end
      end
    end
  end

  -- entries splits a hold value into its lapse time (µs) and entries.
  local function entries(hv)
    local exp = tonumber(string.match(hv, '^(%d+)'))
    local list = {}
    for line in string.gmatch(hv, '\n([^\n]+)') do list[#list + 1] = line end
    return exp, list
  end

  local function entrykey(line)
    return string.match(line, '^%a (%S+)')
  end

  -- markKey sets the hold marker of the packed value at key to at (ms),
  -- or removes it (at nil).
  local function markKey(key, at)
    put(key, MARK, function()
      if at then return at, '' end
    end)
  end

  -- logMark sets the hold marker of the log at key (lg: as the frame
  -- read it) to at (ms), or removes it (at nil); an empty log gets none.
  local function logMark(key, lg, at)
    if lg.markm then redis.call('ZREM', key, lg.markm) end
    if at and redis.call('EXISTS', key) == 1 then
      redis.call('ZADD', key, BIG, '!' .. sf('%d', at))
    end
  end

  -- lapse gives back the units of the lapsed holds in hkey on the keys
  -- named (key -> index) and on the nested sets whose root is named
  -- (their sections are in its value), and sets the hold marker of each
  -- packed value (vals: index -> parsed) and log (logs: index -> state)
  -- to the earliest lapse of the holds still open with units there.
  local function lapse(hkey, named, keyOf, vals, logs)
    local h = redis.call('HGETALL', hkey)
    local soon = {}
    for i = 1, #h, 2 do
      local exp, list = entries(h[i + 1])
      if exp <= now then
        local rest = {}
        for _, e in ipairs(list) do
          local k = entrykey(e)
          local at = string.find(k, '%n', 1, true)
          if named[k] or (at and named[string.sub(k, 1, at - 1)]) then refund(e) else rest[#rest + 1] = e end
        end
        if #rest == 0 then
          redis.call('HDEL', hkey, h[i])
        elseif #rest < #list then
          redis.call('HSET', hkey, h[i], sf('%d', exp) .. '\n' .. table.concat(rest, '\n'))
        end
      else
        local ms = math.floor(exp / 1000)
        for _, e in ipairs(list) do
          local k = named[entrykey(e)]
          if k and (not soon[k] or ms < soon[k]) then soon[k] = ms end
        end
      end
    end
    for k, m in pairs(vals) do
      if m[MARK] or soon[k] then markKey(keyOf(k), soon[k]) end
    end
    for k, lg in pairs(logs) do
      if lg.mark or soon[k] then logMark(keyOf(k), lg, soon[k]) end
    end
  end

  return {refund = refund, entries = entries, entrykey = entrykey, lapse = lapse, logMark = logMark}
end

-- upgrade.lua: reading through the one-key-per-rule layout (freqcap
-- before the packed layout; Options.Upgrade in backends/redis), where a
-- rule's state was a key of its own (driver.Rule.Key): a counter string,
-- a hash of cells, a TAT string, a sorted set. The frame calls it only for
-- a packed value, or a packed log, that does not exist yet; the per-rule
-- keys are read, not changed, and expire on their own. A packed log is
-- also built from the sorted-set logs of the layout before packed logs,
-- and a sliding window's (driver.LogLine) from the cells it counted in
-- before it was a log.

-- upgrade returns oldState, oldLog and oldLogs, built only where an attempt reads
-- through (ARGV's old key indices, a packed log's p2).
local function upgrade()
  -- oldState returns the packed value the packed rules of attempt (kb, ab)
  -- stored at key index ki would have, built from their per-rule keys (the
  -- rule's ARGV b+8 names it, 0 for none), or nil when none has state.
  local function oldState(kb, ab, n, ki, now)
    local parts = {}
    for r = 1, n do
      local b = ab + 20 + (r - 1) * 8
      local oi = tonumber(ARGV[b + 8])
      if oi > 0 and tonumber(ARGV[b + 7]) == ki then
        local code, tag, okey = ARGV[b + 1], ARGV[b + 6], KEYS[kb + oi]
        if code == 'f' or code == 'c' then
          do
            -- The one-key-per-rule layout's counter (a string whose PEXPIRETIME is its
            -- window's end): an entry of that window.
            local cnt = redis.pcall('GET', okey)
            if type(cnt) == 'string' and tonumber(cnt) then
              local pet = redis.call('PEXPIRETIME', okey)
              if pet > 0 then parts[#parts + 1] = struct.pack('<c4I3I6I7', tag, 7, pet, tonumber(cnt)) end
            end
          end
        elseif code == 's' then
          local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
          do
            -- The one-key-per-rule layout's hash okey, one field per cell (the same
            -- driver.CellSpan: K and s, the caller's), as the entry of tag: its newest
            -- K+1 cells.
            local h = redis.pcall('HGETALL', okey)
            if type(h) == 'table' and not h.err and #h > 0 then
              local cs, hi = {}, nil
              for k = 1, #h, 2 do
                local j, u = tonumber(h[k]), tonumber(h[k + 1])
                if j and u and u > 0 then
                  cs[j] = u
                  if not hi or j > hi then hi = j end
                end
              end
              if hi then
                local list, sum = {hi, 0}, 0
                for j = hi - K, hi do
                  list[#list + 1] = cs[j] or 0
                  sum = sum + (cs[j] or 0)
                end
                list[2] = sum
                local body = pints(list)
                parts[#parts + 1] = struct.pack('<c4I3I6', tag, #body, math.ceil((hi + K + 1) * s / 1000)) .. body
              end
            end
          end
        elseif code == 'g' then
          do
            -- The one-key-per-rule layout's TAT (µs, an integer string).
            local nsup, tatok = mods()
            local tv = redis.pcall('GET', okey)
            if type(tv) == 'string' and tatok(tv) and #tv <= 16 then
              local tat = tonumber(tv)
              if tat > now then parts[#parts + 1] = struct.pack('<c4I3I6I7', tag, 7, math.ceil(tat / 1000), tat) end
            end
          end
        end
      end
    end
    if #parts == 0 then return nil end
    return FMT .. table.concat(parts)
  end

  -- oldLog fills the sorted set key, shared by the sliding-log rules whose
  -- per-rule logs are olds (keys), from them when key does not exist:
  -- every admission added the same member to each rule's log, so their
  -- union (by member) is the shared log. It lives as long as the longest
  -- window w (µs).
  local function oldLog(key, olds, w)
    if #olds == 0 or redis.call('EXISTS', key) == 1 then return end
    local args = {'ZUNIONSTORE', key, #olds}
    for _, k in ipairs(olds) do args[#args + 1] = k end
    args[#args + 1] = 'AGGREGATE'
    args[#args + 1] = 'MAX'
    if redis.call(unpack(args)) > 0 then redis.call('PEXPIRE', key, math.ceil(w / 1000)) end
  end
  -- oldLogs returns the entry (tag) of a packed log of window w (µs) and
  -- limit L read from what its rule counted in before, or nil when that
  -- holds nothing in the window (alg/log.lua's import): a sliding log's
  -- sorted-set logs srcs; a sliding window's cells (cells: {K, s, their
  -- entry's tag, the one-key-per-rule layout's hash or nil}), the entry
  -- of that tag in the set's value v (m: unpackv's map of it), else the
  -- hash's (alg/sliding.lua's import), each live cell's units carried
  -- (alg/sliding.lua's live).
  local function oldLogs(srcs, w, L, tag, now, cells, v, m)
    local parts, live = {}, {}
    if cells then
      local K, s, p = cells[1], cells[2], m[cells[3]]
      if not p and cells[4] then
        local okey, tag = cells[4], cells[3]
        do
          -- The one-key-per-rule layout's hash okey, one field per cell (the same
          -- driver.CellSpan: K and s, the caller's), as the entry of tag: its newest
          -- K+1 cells.
          local h = redis.pcall('HGETALL', okey)
          if type(h) == 'table' and not h.err and #h > 0 then
            local cs, hi = {}, nil
            for k = 1, #h, 2 do
              local j, u = tonumber(h[k]), tonumber(h[k + 1])
              if j and u and u > 0 then
                cs[j] = u
                if not hi or j > hi then hi = j end
              end
            end
            if hi then
              local list, sum = {hi, 0}, 0
              for j = hi - K, hi do
                list[#list + 1] = cs[j] or 0
                sum = sum + (cs[j] or 0)
              end
              list[2] = sum
              local body = pints(list)
              parts[#parts + 1] = struct.pack('<c4I3I6', tag, #body, math.ceil((hi + K + 1) * s / 1000)) .. body
            end
          end
        end
        if parts[1] then v, p, parts = FMT .. parts[1], 2, {} end
      end
      if p then
        do
          -- The cells of the entry at p of v (K and s, the caller's) that still
          -- count at now and hold units, appended to live as {when the cell stops
          -- counting (leaves, µs), its units}: what a log carries of them
          -- (upgrade.lua's oldLogs).
          local _, pl, _, pq = struct.unpack('<c4I3I6', v, p)
          local k = (pl - 14) / 7
          local top = struct.unpack('<I7', v, pq)
          local lo = (now - now % s) / s - K
          for z = 1, k do
            local j, u = top - k + z, struct.unpack('<I7', v, pq + 7 + 7 * z)
            if u > 0 and j >= lo then live[#live + 1] = {(j + K + 1) * s, u} end
          end
        end
      end
    end
    do
      -- What the rule counted in before (upgrade.lua's oldLogs) as a packed
      -- entry, per instant in (now-w, BIG): the sorted-set logs srcs (the set's
      -- "%l" log, the one-key-per-rule layout's per-rule logs: every admission
      -- added the same member to each), a member one unit at its score (the
      -- union by member, the hold markers scored BIG left out); and live, the
      -- cells of a sliding window before it was a log, a cell's units at when
      -- it stops counting less w, so that they leave the window exactly when
      -- the cell would have stopped counting (the cell's end when cells divide
      -- the window, later when they do not). At most L records (each holds a
      -- unit or more, as a decision leaves them): the oldest beyond are folded
      -- into the oldest kept, leaving with it, later than they would have
      -- (never earlier); no unit is dropped.
      local seen, units, ts = {}, {}, {}
      for _, src in ipairs(srcs) do
        local z = redis.pcall('ZRANGEBYSCORE', src, sf('(%d', now - w), BELOW, 'WITHSCORES')
        if type(z) == 'table' and not z.err then
          for y = 1, #z, 2 do
            if not seen[z[y]] then
              seen[z[y]] = true
              local t = tonumber(z[y + 1])
              if not units[t] then ts[#ts + 1] = t end
              units[t] = (units[t] or 0) + 1
            end
          end
        end
      end
      for _, cell in ipairs(live) do
        local t = cell[1] - w
        if t > now - w then
          if not units[t] then ts[#ts + 1] = t end
          units[t] = (units[t] or 0) + cell[2]
        end
      end
      if #ts > 0 then
        table.sort(ts)
        local out, cum, first = {0}, 0, #ts - L + 1
        for z, t in ipairs(ts) do
          cum = cum + units[t]
          if z >= first then
            out[#out + 1] = t
            out[#out + 1] = cum
          end
        end
        local body = pints(out)
        local exp = (ts[#ts] + w) / 1000 -- ms, rounded up
        if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
        parts[#parts + 1] = struct.pack('<c4I3I6', tag, #body, exp) .. body
      end
    end
    return parts[1]
  end
  return oldState, oldLog, oldLogs
end

-- take.lua: the decide script's frame. One EVALSHA decides one or more
-- attempts in order, each over all its rules, all-or-nothing. (lua.go
-- puts prelude.lua and holds.lua first, and pastes the sections of the
-- algorithm fragments, alg/*.lua, where a "--@<fragment>.<section>" line
-- names them; backends/redis/args.go writes what this reads.)
--
-- The upper-case names (A_*, R_*, OP_*, C_*, HA, RA, HDR, REC, …) are
-- declared in Go (internal/lua/tokens.go, which declares each position, code
-- and format once): lua.go writes their values in when it builds the
-- script.
--
-- What the sections see: r (the rule's number), b (its ARGV offset: code
-- b+R_CODE, name b+R_NAME, limit b+R_LIMIT, p1 b+R_P1, p2 b+R_P2, tag
-- b+R_TAG, key index b+R_KEY, old key index b+R_OLD),
-- code, L (limit), tag, ki, key, c (cost), now, st (per rule: what eval
-- hands to commit), plan (a reservation's entries, or nil); a packed
-- rule's v (the value read) and p (its entry's start, or nil) with, when
-- p, the entry's payload length pl, expiry pe and payload start pq; a log
-- rule's lg (its log's state). eval sets flags (RULE_ALLOWED,
-- RULE_DENIED or RULE_TOOHIGH: the cost could never fit), used, reset and retry (µs), and saves what commit
-- needs with a line "--@save a, b" (here st[r] = {a, b}; lua.go); commit
-- gets them back with "--@load a, b" (here from x = st[r]) and used
-- (before), sets used and reset after consuming and, for
-- a packed rule, ent (the whole entry) and exp (its expiry, ms); a
-- fragment may name its entry's values instead, with a last line
-- "--@entry FORMAT, tag, len, exp, …" (here ent = struct.pack(FORMAT,
-- tag, len, exp, …); a fast script packs its set's value from them). A
-- section that refuses the attempt sets fail to the error reply and
-- breaks out of the rule loop.
--
-- ARGV[1]  m, the number of attempts; then each attempt's arguments, from
-- offset a (the first attempt: a = 1), naming its keys from offset k
-- (the first: k = 0) as "index i" = KEYS[k+i]:
-- ARGV[a+A_OP]   op: t take, p peek, r reserve, i inspect (peek of 1 + trail)
-- ARGV[a+A_COST]   cost (>= 1)
-- ARGV[a+A_RULES]   n, the number of rules
-- ARGV[a+A_KEYS]   nk, the number of keys of this attempt
-- ARGV[a+A_TRAIL]   tk: index of the trail (list), 0 = none
-- ARGV[a+A_HOLDS]   hk: index of the reservations (hash), 0 = none
-- ARGV[a+A_RECORD]   ik: index of the idempotency record, 0 = none (ops t, r)
-- ARGV[a+A_TRAIL_MAX]   trail: max entries (0: none written; op i: 0 reads all)
-- ARGV[a+A_TRAIL_TTL]   trail: TTL, ms
-- ARGV[a+A_POLICY]  policy name (trail entries)
-- ARGV[a+A_TRAIL_VALUES]  trail: the attempt's values (driver.Request.TrailValues,
--             opaque, never holding '|'), "" = none
-- ARGV[a+A_RECORD_TTL]  the idempotency record's TTL, ms
-- ARGV[a+A_HOLD_ID]  op r: hold id; ARGV[a+A_HOLD_LIFE] its lifetime µs; ARGV[a+A_HOLDS_TTL] the
--             reservations key's TTL, ms
-- ARGV[a+A_OVERRIDES]  ok: index of the overrides (hash, driver.Request.OverrideKey),
--             0 = none
-- ARGV[a+A_SHADOWS]  shadows: "" (none) or one character per rule, '1' for a
--             shadow rule (driver.Rule.Shadow), '0' otherwise
-- ARGV[a+A_SEEDS]  seeds: "" (none) or per rule its seed (driver.Rule.Seed, the
--             1-based index of an earlier rule; 0 = none), comma-separated
-- ARGV[a+A_WINDOWS]  windows: "" or, when ok > 0 and a rule is GCRA, per rule its window in µs,
--             comma-separated (a GCRA rule's rate under a limit override)
-- ARGV[a+A_NEST]  nested sets: "" or per dimension set whose value is a
--             section of a root's (prelude.lua) struct NESTREC: its key
--             index, its root's, 1 under Options.Upgrade (a set without its
--             section yet is then read from its own key, the layout before
--             nesting, deleted once the section is written), its id
-- then RA per rule: code, name, limit, p1, p2, tag, ki (the index of the
-- rule's state key) and oi (the index of its key in the one-key-per-rule
-- layout, read through while the packed layout has no state there:
-- upgrade.lua; 0 = none), where code is
--   f  fixed window, epoch-aligned   packed   (alg/fixed.lua)
--   c  calendar fixed window         packed   (alg/fixed.lua)
--   s  sliding window counters       packed   (alg/sliding.lua)
--   g  GCRA                          packed   (alg/gcra.lua)
--   l  sliding log, limit at most    packed (alg/log.lua; p2, under
--      driver.LogLine (and sliding   Options.Upgrade, what the log is
--      windows evaluated as logs)    built from once: the index of the
--                                    set's sorted-set log, or a sliding
--                                    window's cells, CARRYREC)
--   z  sliding log, larger limit     the dimension set's sorted set
--                                    (alg/zlog.lua; p2: the index of its
--                                    key in the previous layout, read
--                                    through under Options.Upgrade)
--   t  sliding window on TairHash    own key  (alg/modsliding.lua)
--   h  sliding window on native hash-field expiry  own key
--   x  GCRA on redis-cell            own key  (alg/cell.lua)
-- Packed rules (prelude.lua) sharing a key are read with one GET and
-- written with one SET; tag identifies the rule's entry there ("" for the
-- others). Unused p's are "0".
--
-- Reply, per attempt: {REPLY_ALLOWED or 0 (plus REPLY_OVERRIDE when an
--   override applied), now µs, the rules' bytes: per rule
--   struct '<Bi7i7i7' flags (RULE_ALLOWED, RULE_DENIED, RULE_TOOHIGH),
--   used, reset-after µs, retry-after µs; then, when an override applied,
--   "<its ID>|<every rule's limit as reported, comma-separated>|<its
--   stored value>"; then (op i) the trail entries,
--   newest first, strings "at µs|policy|rule|used|limit|cost|retry
--   µs|flags" (prelude.lua's TRAIL), then "|values" when
--   ARGV[a+A_TRAIL_VALUES] is not empty}.
-- The caller knows each rule's limit (but for overrides), hence remaining
-- = math.max(0, limit-used).
-- A replay (a live idempotency record exists) returns the stored reply
-- with REPLY_REPLAYED added to its first element and the original hold id ("" for a
-- take) appended; nothing else happens.
--
-- Shadow rules (ARGV[a+A_SHADOWS]) are evaluated and reported but never deny;
-- they are committed only when they admit and the attempt consumes; a
-- take or reserve they would have denied writes a trail entry flagged TRAIL_SHADOW,
-- allowed or not. A seeded rule (ARGV[a+A_SEEDS]) whose state shows nothing
-- (used 0) is first given the state a take of u units at now leaves on
-- empty state (its fragment's eval and commit run on no state with cost
-- u), u being its seed rule's used as evaluated in this attempt; the
-- seeded state is written by a take or reserve, allowed or denied (a
-- denied one writes the carried units alone), never by a peek. Overrides
-- (ARGV[a+A_OVERRIDES], a hash: field = ID, value = storage.go's override format, of
-- which the script reads "<kind>|<counted>|<until µs>|<created µs>|
-- <limits>|"): live ones (until 0 or after now) apply, block over exempt
-- over limits (the latest ID of each kind; per rule for limits).
-- One attempt (m = 1): the script's reply is the attempt's. Several: an
-- array of them, where an attempt that failed is an error element.
-- Errors: redis.error_reply with a "freqcap:" message (never naming a
-- key: keys hold subject values), returned before the attempt writes
-- anything. Among them: a state key holding a value freqcap did not write
-- (CL.THROTTLE would abort the server on a foreign redis-cell key).

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local nowms = math.floor(now / 1000)

-- The attempts run in order in one loop (not a function per attempt: Lua
-- would build it anew on every run of the script). An attempt ends early
-- by setting its reply (fail, from inside a rule loop) and breaking out of
-- its repeat block.
-- vkey returns the name of the attempt's key index k (keys from kb) in
-- reservations and to holds.lua: a nested set's VKEY (nest: the
-- attempt's nested sets), else its key.
local function vkey(kb, nest, k)
  local nk = nest and nest[k]
  if not nk then return KEYS[kb + k] end
  local root = KEYS[kb + nk[1]]
  return root .. '%n' .. string.sub(KEYS[kb + k], #root + 1)
end

local attempts = tonumber(ARGV[1])
local replies = {}
local NONE = {} -- no logs (most attempts): read-only
local kb, ab = 0, 1
for a = 1, attempts do
  local n = tonumber(ARGV[ab + 3])
  local nk = tonumber(ARGV[ab + 4])
  local tk, hk, ik = tonumber(ARGV[ab + 5]), tonumber(ARGV[ab + 6]), tonumber(ARGV[ab + 7])
  local op = ARGV[ab + 1]
  local reply, fail
  -- nest: key index -> {its root's key index, Options.Upgrade, its id},
  -- for the nested sets; nil (most attempts) when none.
  local nest
  local nspec = ARGV[ab + 20]
  if nspec ~= '' then
    nest = {}
    for p = 1, #nspec, 13 do
      local ki, ri, u, id = struct.unpack('<I2I2Bc8', nspec, p)
      nest[ki] = {ri, u == 1, id}
    end
  end
  repeat
    -- Idempotency: a live record means this attempt was decided before.
    -- A record (internal/lua/tokens.go declares it; bare mode writes it
    -- too) is REC, then struct RECHDR (the first element, now, the rules'
    -- bytes' length), the rules' bytes as the reply has them, then with
    -- an override (first element >= 4) its element (RECLEN length, then
    -- bytes), then the hold id. The legacy text "<hold id>|<the reply's
    -- integers, comma-separated>" (the one-key-per-rule layout's and bare
    -- mode's before they wrote REC) is still read, never written.
    if ik > 0 then
      local rec = redis.call('GET', KEYS[kb + ik])
      if rec then
        if string.sub(rec, 1, 1) == '\002' then
          local al, at, len, p = struct.unpack('<Bi7I2', rec, 2)
          local bin = string.sub(rec, p, p + len - 1)
          p = p + len
          if al >= 4 then
            local ol, q = struct.unpack('<I2', rec, p)
            reply = {al + 2, at, bin, string.sub(rec, q, q + ol - 1), string.sub(rec, q + ol)}
          else
            reply = {al + 2, at, bin, string.sub(rec, p)}
          end
          break
        end
        local sep = string.find(rec, '|', 1, true)
        local ints = {}
        for d in string.gmatch(string.sub(rec, sep + 1), '[^,]+') do ints[#ints + 1] = tonumber(d) end
        local k = (#ints - 2) / 4
        local bin = ''
        if k > 0 then bin = struct.pack('<' .. string.rep(string.sub('<Bi7i7i7', 2), k), unpack(ints, 3)) end
        reply = {ints[1] + 2, ints[2], bin, string.sub(rec, 1, sep - 1)}
        break
      end
    end

    -- Read: every packed value once, every log once (trimmed), and every
    -- redis-cell key checked, before anything is written. Twice when
    -- lapsed reservations were given back in between.
    local vals, raws, logs, tats, own, built, olds
    for pass = 1, 2 do
      vals, raws, logs, tats, own, olds = {}, {}, NONE, nil, false, nil
      for r = 1, n do
        local b = ab + 20 + (r - 1) * 8
        local code = ARGV[b + 1]
        local ki = tonumber(ARGV[b + 7])
        local key = KEYS[kb + ki]
        if code == 'l' and ARGV[b + 5] ~= '0' then
          -- Options.Upgrade: what the rule's packed log is built from when
          -- it is not there yet: a sliding log's sorted-set logs (the
          -- set's, p2, and the rule's own), a sliding window's cells (p2 a
          -- CARRYREC: the set's value's entry of their tag, else the rule's
          -- own hash).
          local p2, srcs, cells, oi = ARGV[b + 5], {}, nil, tonumber(ARGV[b + 8])
          if string.sub(p2, 1, 1) == 's' then
            local _, K, s, ctag = struct.unpack('<c1I7I7c4', p2)
            cells = {K, s, ctag}
            if oi > 0 then cells[4] = KEYS[kb + oi] end
          else
            srcs[1] = KEYS[kb + tonumber(p2)]
            if oi > 0 then srcs[2] = KEYS[kb + oi] end
          end
          olds = olds or {}
          olds[#olds + 1] = {ki, ARGV[b + 6], tonumber(ARGV[b + 4]), srcs, cells, tonumber(ARGV[b + 3])}
        end
        if code == 'f' or code == 's' or code == 'g' or code == 'c' or code == 'l' then
          local ns = nest and nest[ki]
          if ns and not vals[ns[1]] then
            -- A nested set: its root's value first (read through as its own
            -- rules would under Options.Upgrade).
            local rv, rm = redis.pcall('GET', KEYS[kb + ns[1]]), nil
            if not rv and ns[2] then
              rv = (upgrade())(kb, ab, n, ns[1], now)
              if rv then
                built = built or {}
                built[ns[1]] = true
              end
            end
            if type(rv) ~= 'table' then rm = unpackv(rv) end
            if not rm then
              fail = redis.error_reply('freqcap: rule ' .. ARGV[b + 2] .. FOREIGN)
              break
            end
            vals[ns[1]], raws[ns[1]] = rm, rv
          end
          if not vals[ki] then
            local v
            if ns then
              v = sectv(raws[ns[1]], vals[ns[1]], ns[3])
              if not v and ns[2] then
                v = redis.pcall('GET', key) -- Options.Upgrade: the set's own key, before nesting
                if v then
                  built = built or {}
                  built[ki], ns[4] = true, true
                end
              end
            else
              v = redis.pcall('GET', key)
            end
            if not v and tonumber(ARGV[b + 8]) > 0 then
              v = (upgrade())(kb, ab, n, ki, now)
              if v then
                built = built or {}
                built[ki] = true -- not stored yet: written whole
              end
            end
            local m
            if type(v) ~= 'table' then m = unpackv(v) end
            if not m then
              fail = redis.error_reply('freqcap: rule ' .. ARGV[b + 2] .. FOREIGN)
              break
            end
            vals[ki], raws[ki] = m, v
          end
        elseif code == 'z' then
          local w = tonumber(ARGV[b + 4])
          if logs == NONE then logs = {} end
          local lg = logs[ki]
          if not lg then
            lg = {w = w, name = ARGV[b + 2], olds = {}}
            logs[ki] = lg
          elseif lg.w < w then
            lg.w = w
          end
          local oi = tonumber(ARGV[b + 8])
          if oi > 0 then lg.olds[#lg.olds + 1] = KEYS[kb + oi] end
          local pk = tonumber(ARGV[b + 5]) -- the previous layout's log (log.lua's read)
          if pk > 0 then lg.prev = KEYS[kb + pk] end
        else
          own = true -- a rule with a key of its own (t, h, x)
          if code == 'x' then
            do
              -- The key holds a TAT CL.THROTTLE wrote, or nothing: checked before
              -- anything is written and before any CL.THROTTLE call (which would abort
              -- the server on anything else). A key of another type (WRONGTYPE) is
              -- refused the same way. The reply names the rule, never the key.
              local nsup, tatok = mods()
              local tv = redis.pcall('GET', key)
              local bad
              if type(tv) == 'table' and tv.err then
                bad = 'is not a string key (WRONGTYPE)'
              elseif tv and not tatok(tv) then
                bad = 'holds a value CL.THROTTLE did not write (it would abort the server on it)'
              end
              if bad then
                fail = redis.error_reply('freqcap: rule ' .. ARGV[b + 2] .. ': ' .. 'the GCRA state key' .. ' ' .. bad .. '; not evaluated, nothing written (delete the key or reset the subject)')
                break
              end
              if not tats then tats = {} end
              tats[r] = tv
            end
          end
        end
      end
      if fail then break end
      for _, o in ipairs(olds or NONE) do
        local ki, tag = o[1], o[2]
        if not vals[ki][tag] then
          local _, _, oldLogs = upgrade()
          local ent = oldLogs(o[4], o[3], o[6], tag, now, o[5], raws[ki], vals[ki])
          if ent then
            local sv = packv(raws[ki], vals[ki], {ent}, 0, nowms)
            raws[ki], vals[ki] = sv, unpackv(sv)
            built = built or {}
            built[ki] = true
          end
        end
      end
      for ki, lg in pairs(logs) do
        local key = KEYS[kb + ki]
        if #lg.olds > 0 then
          local _, oldLog = upgrade()
          oldLog(key, lg.olds, lg.w)
        end
        do
          -- The log at key, trimmed to its longest window w, and its two highest
          -- members: the newest entry and the hold marker, if any. A log found
          -- empty is first filled from lg.prev, when given: the dimension set's log
          -- as the previous layout named it ("%l" and a hash of its log rules'
          -- tags), copied (ZUNIONSTORE, nothing when it is gone), then read again.
          for pass = 1, 2 do
            local d = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', sf('%d', now - lg.w))
            if type(d) == 'table' then
              fail = redis.error_reply('freqcap: rule ' .. lg.name .. ': the sliding log key is not a sorted set (WRONGTYPE)' .. '; not evaluated, nothing written (delete the key or reset the subject)')
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
            redis.call('PEXPIREAT', key, sf('%d', at))
          end
          if fail then break end
        end
      end
      if fail or pass == 2 or hk == 0 then break end
      -- Lapsed reservations: their units go back (only on keys this
      -- attempt names). The reservations are read only when a hold marker
      -- says one may have lapsed, or a rule keeps a key of its own.
      local need = own
      if not need then
        for ki, m in pairs(vals) do
          local mp = m[MARK]
          if mp then
            local _, _, exp = struct.unpack('<c4I3I6', raws[ki], mp)
            if exp * 1000 <= now then need = true end
          end
        end
        for _, lg in pairs(logs) do
          if lg.mark and lg.mark * 1000 <= now then need = true end
        end
      end
      if not need then break end
      local named = {}
      for k = 1, nk do named[vkey(kb, nest, k)] = k end
      holds(now).lapse(KEYS[kb + hk], named, function(k) return vkey(kb, nest, k) end, vals, logs)
    end
    if fail then
      reply = fail
      break
    end
    if op == 'r' and redis.call('HEXISTS', KEYS[kb + hk], ARGV[ab + 13]) == 1 then
      reply = redis.error_reply('freqcap: hold id already in use')
      break
    end

    local c = 1
    if op ~= 'i' then c = tonumber(ARGV[ab + 2]) end
    local consume = op == 't' or op == 'r'

    -- Shadow rules, seeds and overrides: nil (the common case) or tables.
    local shadow, seeds, blk, ex, lims, wins
    if ARGV[ab + 17] ~= '' then
      shadow = {}
      for r = 1, n do shadow[r] = string.byte(ARGV[ab + 17], r) == 49 end
    end
    if ARGV[ab + 18] ~= '' then
      seeds = {}
      for d in string.gmatch(ARGV[ab + 18], '%d+') do seeds[#seeds + 1] = tonumber(d) end
    end
    local ok = tonumber(ARGV[ab + 16])
    if ok > 0 then
      local h = redis.pcall('HGETALL', KEYS[kb + ok])
      if h.err then
        reply = redis.error_reply('freqcap: the overrides key is not a hash (WRONGTYPE); not evaluated, nothing written')
        break
      end
      blk, ex, lims = overrides(h, now)
      if lims and ARGV[ab + 19] ~= '' then
        wins = {}
        for d in string.gmatch(ARGV[ab + 19], '%d+') do wins[#wins + 1] = tonumber(d) end
      end
    end
    -- lim: the limits reported per rule once an override applied; ov: the
    -- override that decided or changed a limit ({ID, stored value});
    -- seededk: the packed values holding a seeded entry.
    local lim, ov, seededk
    if blk then ov = blk elseif ex then ov = ex end

    -- Phase 1: evaluate every rule, writing nothing.
    local res = {0, now}
    local st = {}
    local allowed = true
    for r = 1, n do
      local b = ab + 20 + (r - 1) * 8
      local code = ARGV[b + 1]
      local L = tonumber(ARGV[b + 3])
      local tag = ARGV[b + 6]
      local ki = tonumber(ARGV[b + 7])
      local key = KEYS[kb + ki]
      if lims then
        -- A limit override: the rule's limit (GCRA: its rate, per its
        -- window, the burst kept: T and the tolerance as
        -- driver.Rule.GCRAParams computes them, the tolerance bounded at
        -- 2^52 µs).
        local lo = lims[ARGV[b + 2]]
        if lo then
          if code == 'g' then
            ARGV[b + 4], ARGV[b + 5] = gcraRate(wins[r], lo[2], L)
          else
            L = lo[2]
          end
          lim = lim or {}
          lim[r] = L
          if not blk and not ex and (not ov or lo[1] > ov[1]) then ov = {lo[1], lo[3]} end
        end
      end
      local flags, used, reset, retry
      local seedu = 0
      if seeds and seeds[r] and seeds[r] > 0 then seedu = res[3 + (seeds[r] - 1) * 4 + 1] end
      for pass = 1, 2 do
        flags, used, reset, retry = 1, 0, 0, 0
        local v, p, _, pl, pe, pq -- a packed rule's value and entry
        if vals[ki] then
          v, p = raws[ki], vals[ki][tag]
          if p then _, pl, pe, pq = struct.unpack('<c4I3I6', v, p) end
        end
        if code == 's' then
          do
            -- Stored cells: k of them, cell j at position base + 7*(j - jb - 1)
            -- (jb = top - k); the counted ones are j >= lo.
            local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
            local i = (now - now % s) / s -- math.floor(now / s), inline: no call
            local lo = i - K
            local newest, k, top, q, list = -1, 0, -1, 0, nil
            if p then
              q = pq
              k = (pl - 14) / 7
              local sum
              top, sum = struct.unpack('<I7I7', v, q)
              if top < lo then
                k = 0 -- every stored cell stopped counting: as if none were stored
              elseif top <= i and k > 0 and struct.unpack('<I7', v, q + 7 * (k + 1)) > 0 then
                -- The newest stored cell holds units: the count is the sum less the
                -- oldest d stored cells, those that stopped counting, which are
                -- dropped (q and k then describe the kept cells, for commit).
                local d = lo - (top - k + 1)
                if d > 0 then
                  for z = 0, d - 1 do sum = sum - struct.unpack('<I7', v, q + 14 + 7 * z) end
                  q, k = q + 7 * d, k - d
                end
                used, newest = sum, top
              elseif top <= i and k == 0 then
                used = sum -- no cells: nothing counts
              else
                list = ints(v, q + 14, k)
                for z = math.max(1, lo - (top - k)), k do
                  local u = list[z]
                  if u > 0 then
                    used = used + u
                    newest = top - k + z
                  end
                end
              end
            end
            if newest >= 0 then reset = (newest + K + 1) * s - now end
            if c > L then
              flags = 2
            elseif used + c > L then
              -- Retry when the oldest cells holding the units over stop counting
              -- (cells beyond i, the server clock having gone back: one cell).
              flags, retry = 0, s
              if p then
                list = list or ints(v, q + 14, k)
                local need, acc = used + c - L, 0
                for z = math.max(1, lo - (top - k)), math.min(k, i - (top - k)) do
                  acc = acc + list[z]
                  if acc >= need then
                    retry = (top - k + z + K + 1) * s - now
                    break
                  end
                end
              end
            end
            st[r] = {i, lo, K, s, list, top, newest, k, q}
          end
        elseif code == 'f' or code == 'c' then
          do
            local e
            if code == 'f' then
              local W = tonumber(ARGV[b + 4])
              e = now - now % W + W
            else
              local prev
              for bv in string.gmatch(ARGV[b + 4], '%d+') do
                local bu = tonumber(bv) * 1000
                if bu > now then
                  if prev then e = bu end
                  break
                end
                prev = bu
              end
              if not e then
                fail = redis.error_reply('freqcap: calendar boundaries do not cover the server time (clock skew?)')
                break
              end
            end
            local em = e / 1000 -- ms, rounded up (inline: no call)
            if em % 1 ~= 0 then em = em - em % 1 + 1 end
            if p and pe == em then used = struct.unpack('<I7', v, pq) end
            if used > 0 then reset = e - now end
            if c > L then
              flags = 2
            elseif used + c > L then
              flags, retry = 0, e - now
            end
            st[r] = {em, e}
          end
        elseif code == 'g' then
          do
            local T, tol = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
            local ttl = 0
            if p then
              ttl = struct.unpack('<I7', v, pq) - now
              if ttl < 0 then ttl = 0 end
            end
            local new = ttl + c * T
            if c > L then
              flags = 2
            elseif new > tol then
              flags, retry = 0, new - tol
            end
            -- What commit stores: a counted exempt takes c whatever the limit, the
            -- TAT at most MAXDEBT µs ahead of now (driver.MaxDebt, alg.GCRAExempt;
            -- never less far than it is). Exact: below MAXDEBT, new is an exact sum;
            -- above, the double is too, and the cap replaces it.
            if new > 35184372088832 then
              if ttl > 35184372088832 then new = ttl else new = 35184372088832 end
            end
            local left = tol - ttl
            local q = left / T
            q = q - q % 1
            if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
            if q < 0 then q = 0 elseif q > L then q = L end
            used, reset = L - q, ttl
            st[r] = {new, ttl, T, tol}
          end
        elseif code == 'l' then
          do
            -- The first record in (now-W, ...] is j (k+1: none); before, the
            -- cumulative count before it (base when j = 1); nl and top, the newest
            -- record's µs and cumulative count (0 and before: none in the window).
            local W = tonumber(ARGV[b + 4])
            local k, j, before, nl, top = 0, 1, 0, 0, 0
            if p then
              k = (pl - 7) / 14
              local hi, from = k + 1, now - W
              while j < hi do
                local m = (j + hi - (j + hi) % 2) / 2
                if struct.unpack('<I7', v, pq + 14 * m - 7) > from then hi = m else j = m + 1 end
              end
              before = struct.unpack('<I7', v, pq + 14 * j - 14)
            end
            top = before
            if j <= k then
              nl, top = struct.unpack('<I7I7', v, pq + 14 * k - 7)
              used = top - before
              reset = nl + W - now
              if c <= L and used + c > L then
                -- Retry when the record where the count reaches the need leaves.
                local need, lo, hi = before + used + c - L, j, k
                while lo < hi do
                  local m = (lo + hi - (lo + hi) % 2) / 2
                  if struct.unpack('<I7', v, pq + 14 * m) >= need then hi = m else lo = m + 1 end
                end
                retry = struct.unpack('<I7', v, pq + 14 * lo - 7) + W - now
              end
            end
            if c > L then
              flags = 2
            elseif used + c > L then
              flags = 0
            end
            st[r] = {j, nl, before, top}
          end
        elseif code == 'z' then
          local lg = logs[ki]
          do
            local W = tonumber(ARGV[b + 4])
            local lo = sf('(%d', now - W)
            used = redis.call('ZCOUNT', key, lo, BELOW)
            if used > 0 then reset = lg.newest + W - now end
            if c > L then
              flags = 2
            elseif used + c > L then
              flags = 0
              local z = redis.call('ZRANGEBYSCORE', key, lo, BELOW, 'WITHSCORES', 'LIMIT', used + c - L - 1, 1)
              retry = tonumber(z[2]) + W - now
            end
          end
        elseif code == 't' or code == 'h' then
          do
            local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
            local i = math.floor(now / s)
            local lo = i - K
            -- Cells are counted by index, never by expiry: fields expire by
            -- themselves (EXHGETALL/HGETALL skip expired ones), but against clocks
            -- other than this TIME, so expiry only reclaims memory.
            local h
            if code == 't' then h = redis.call('EXHGETALL', key) else h = redis.call('HGETALL', key) end
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
              flags = 2
            elseif used + c > L then
              -- Retry when the oldest cells holding the units over stop counting
              -- (cells beyond i, the server clock having gone back: one cell).
              flags, retry = 0, s
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
          end
        elseif code == 'x' then
          do
            local nsup, tatok = mods()
            local T = tonumber(ARGV[b + 4])
            local cnt, per = string.match(ARGV[b + 5], '^(%d+):(%d+)$')
            local tv = tats[r]
            local pk = redis.call('CL.THROTTLE', key, L - 1, cnt, per, 0)
            local ttl = 0
            if tv then ttl = math.max(nsup(tv) - now, 0) end
            local rem = tonumber(pk[3])
            if c > L then
              flags = 2
            elseif rem < c then
              flags, retry = 0, math.max(1, ttl + c * T - T * L)
            end
            if rem < 0 then rem = 0 elseif rem > L then rem = L end
            used, reset = L - rem, ttl
            st[r] = {cnt, per, T, tv}
          end
        else
          fail = redis.error_reply('freqcap: unknown algorithm code ' .. tostring(code))
          break
        end
        if fail or pass == 2 or seedu <= 0 or used > 0 then break end
        -- Seeding: the rule's state shows nothing. A packed rule gets the
        -- entry its fragment's commit writes for a take of seedu units on
        -- no state (its eval run first, as commit needs), spliced into the
        -- value read, and is evaluated again on it (pass 2); the value is
        -- then written whole by a take or reserve, allowed or denied.
        if code == 's' or code == 'f' or code == 'c' or code == 'g' or code == 'l' then
          local ent, exp
          do
            local c, L, p, plan, st = seedu, math.max(L, seedu), nil, nil, {}
            local flags, used, reset, retry = 1, 0, 0, 0
            if code == 's' then
              do
                -- Stored cells: k of them, cell j at position base + 7*(j - jb - 1)
                -- (jb = top - k); the counted ones are j >= lo.
                local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
                local i = (now - now % s) / s -- math.floor(now / s), inline: no call
                local lo = i - K
                local newest, k, top, q, list = -1, 0, -1, 0, nil
                if p then
                  q = pq
                  k = (pl - 14) / 7
                  local sum
                  top, sum = struct.unpack('<I7I7', v, q)
                  if top < lo then
                    k = 0 -- every stored cell stopped counting: as if none were stored
                  elseif top <= i and k > 0 and struct.unpack('<I7', v, q + 7 * (k + 1)) > 0 then
                    -- The newest stored cell holds units: the count is the sum less the
                    -- oldest d stored cells, those that stopped counting, which are
                    -- dropped (q and k then describe the kept cells, for commit).
                    local d = lo - (top - k + 1)
                    if d > 0 then
                      for z = 0, d - 1 do sum = sum - struct.unpack('<I7', v, q + 14 + 7 * z) end
                      q, k = q + 7 * d, k - d
                    end
                    used, newest = sum, top
                  elseif top <= i and k == 0 then
                    used = sum -- no cells: nothing counts
                  else
                    list = ints(v, q + 14, k)
                    for z = math.max(1, lo - (top - k)), k do
                      local u = list[z]
                      if u > 0 then
                        used = used + u
                        newest = top - k + z
                      end
                    end
                  end
                end
                if newest >= 0 then reset = (newest + K + 1) * s - now end
                if c > L then
                  flags = 2
                elseif used + c > L then
                  -- Retry when the oldest cells holding the units over stop counting
                  -- (cells beyond i, the server clock having gone back: one cell).
                  flags, retry = 0, s
                  if p then
                    list = list or ints(v, q + 14, k)
                    local need, acc = used + c - L, 0
                    for z = math.max(1, lo - (top - k)), math.min(k, i - (top - k)) do
                      acc = acc + list[z]
                      if acc >= need then
                        retry = (top - k + z + K + 1) * s - now
                        break
                      end
                    end
                  end
                end
                st[r] = {i, lo, K, s, list, top, newest, k, q}
              end
            elseif code == 'g' then
              do
                local T, tol = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
                local ttl = 0
                if p then
                  ttl = struct.unpack('<I7', v, pq) - now
                  if ttl < 0 then ttl = 0 end
                end
                local new = ttl + c * T
                if c > L then
                  flags = 2
                elseif new > tol then
                  flags, retry = 0, new - tol
                end
                -- What commit stores: a counted exempt takes c whatever the limit, the
                -- TAT at most MAXDEBT µs ahead of now (driver.MaxDebt, alg.GCRAExempt;
                -- never less far than it is). Exact: below MAXDEBT, new is an exact sum;
                -- above, the double is too, and the cap replaces it.
                if new > 35184372088832 then
                  if ttl > 35184372088832 then new = ttl else new = 35184372088832 end
                end
                local left = tol - ttl
                local q = left / T
                q = q - q % 1
                if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
                if q < 0 then q = 0 elseif q > L then q = L end
                used, reset = L - q, ttl
                st[r] = {new, ttl, T, tol}
              end
            elseif code == 'l' then
              do
                -- The first record in (now-W, ...] is j (k+1: none); before, the
                -- cumulative count before it (base when j = 1); nl and top, the newest
                -- record's µs and cumulative count (0 and before: none in the window).
                local W = tonumber(ARGV[b + 4])
                local k, j, before, nl, top = 0, 1, 0, 0, 0
                if p then
                  k = (pl - 7) / 14
                  local hi, from = k + 1, now - W
                  while j < hi do
                    local m = (j + hi - (j + hi) % 2) / 2
                    if struct.unpack('<I7', v, pq + 14 * m - 7) > from then hi = m else j = m + 1 end
                  end
                  before = struct.unpack('<I7', v, pq + 14 * j - 14)
                end
                top = before
                if j <= k then
                  nl, top = struct.unpack('<I7I7', v, pq + 14 * k - 7)
                  used = top - before
                  reset = nl + W - now
                  if c <= L and used + c > L then
                    -- Retry when the record where the count reaches the need leaves.
                    local need, lo, hi = before + used + c - L, j, k
                    while lo < hi do
                      local m = (lo + hi - (lo + hi) % 2) / 2
                      if struct.unpack('<I7', v, pq + 14 * m) >= need then hi = m else lo = m + 1 end
                    end
                    retry = struct.unpack('<I7', v, pq + 14 * lo - 7) + W - now
                  end
                end
                if c > L then
                  flags = 2
                elseif used + c > L then
                  flags = 0
                end
                st[r] = {j, nl, before, top}
              end
            else
              do
                local e
                if code == 'f' then
                  local W = tonumber(ARGV[b + 4])
                  e = now - now % W + W
                else
                  local prev
                  for bv in string.gmatch(ARGV[b + 4], '%d+') do
                    local bu = tonumber(bv) * 1000
                    if bu > now then
                      if prev then e = bu end
                      break
                    end
                    prev = bu
                  end
                  if not e then
                    fail = redis.error_reply('freqcap: calendar boundaries do not cover the server time (clock skew?)')
                    break
                  end
                end
                local em = e / 1000 -- ms, rounded up (inline: no call)
                if em % 1 ~= 0 then em = em - em % 1 + 1 end
                if p and pe == em then used = struct.unpack('<I7', v, pq) end
                if used > 0 then reset = e - now end
                if c > L then
                  flags = 2
                elseif used + c > L then
                  flags, retry = 0, e - now
                end
                st[r] = {em, e}
              end
            end
            local x = st[r]
            used, reset = 0, 0
            if code == 's' then
              do
                -- The fast ways: the same cell gets c more, or a new cell c, the stored
                -- bytes copied around them; otherwise the cells are rebuilt from the
                -- oldest counted one holding units (or i) to the newest.
                local i, lo, K, s, list, top, newest, k, q = x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9]
                -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
                -- alg.Exempt): c is what this rule takes, none once it is there.
                local c = c
                if used + c > 4503599627370496 then
                  c = 4503599627370496 - used
                  if c < 0 then c = 0 end
                end
                local hi = i
                if newest > i then hi = newest end
                exp = (hi + K + 1) * s / 1000 -- ms, rounded up
                if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
                if not list and k > 0 and top == i then
                  -- The entry's header and top and sum in one pack, the cells copied.
                  local last = struct.unpack('<I7', v, q + 7 * (k + 1))
                  ent = struct.pack('<c4I3I6I7I7', tag, 7 * (k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 7 * (k + 1) - 1) .. struct.pack('<I7', last + c)
                elseif not list and k > 0 and top < i then
                  ent = struct.pack('<c4I3I6I7I7', tag, 7 * (i - top + k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 14 + 7 * k - 1) .. string.rep('\0', 7 * (i - top - 1)) .. struct.pack('<I7', c)
                else
                  local first, jb = i, top - k
                  if list or k > 0 then
                    list = list or ints(v, q + 14, k)
                    for z = math.max(1, lo - jb), k do
                      if list[z] > 0 then
                        first = math.min(first, jb + z)
                        break
                      end
                    end
                  end
                  local out = {hi, used + c}
                  for j = first, hi do
                    local z, u = j - jb, 0
                    if z >= 1 and z <= k then u = list[z] end
                    if j == i then u = u + c end
                    out[#out + 1] = u
                  end
                  local body = pints(out)
                  ent = struct.pack('<c4I3I6', tag, #body, exp) .. body
                end
                -- None taken (saturated): reported as evaluated (a cell of 0 units
                -- holds none).
                if c > 0 then used, reset = used + c, (hi + K + 1) * s - now end
                if plan then
                  plan[#plan + 1] = 'S ' .. key .. ' ' .. tag .. ' ' .. sf('%d', i) .. ' ' .. sf('%d', c) .. ' ' .. sf('%d', (i + K + 1) * s)
                end
              end
            elseif code == 'g' then
              do
                local new, ttl, T, tol = x[1], x[2], x[3], x[4]
                local tat = now + new
                local left = tol - new
                local q = left / T
                q = q - q % 1
                if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
                if q < 0 then q = 0 elseif q > L then q = L end
                exp = tat / 1000
                if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
                used, reset = L - q, new
                ent = struct.pack('<c4I3I6I7', tag, 7, exp, tat)
                if plan then plan[#plan + 1] = 'G ' .. key .. ' ' .. tag .. ' ' .. sf('%d', new - ttl) .. ' ' .. sf('%d', tat) end
              end
            elseif code == 'l' then
              do
                -- Trimmed to the window, c units at now added: the entry is base (before),
                -- the records kept but the last (mid, as stored), then the last record
                -- (lt µs, lc units), packed in one struct.pack (eval read every number it
                -- needs: commit reads none).
                local j, nl, before, top = x[1], x[2], x[3], x[4]
                -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
                -- alg.Exempt): c is what this rule takes, none once it is there.
                local c = c
                if used + c > 4503599627370496 then
                  c = 4503599627370496 - used
                  if c < 0 then c = 0 end
                end
                local W = tonumber(ARGV[b + 4])
                local k = 0
                if p then k = (pl - 7) / 14 end
                local mid, lt, lc = '', now, top + c -- none left in the window: one record at now
                if c == 0 then
                  -- None taken (saturated, so j <= k): the records in the window kept.
                  mid, lt = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8), nl
                elseif j <= k and nl == now then
                  mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8)
                elseif j <= k and nl < now then
                  mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k + 6)
                elseif j <= k then
                  -- The server clock went back: c units at now, in order (added to a
                  -- record at now), the later records' counts up by c; the newest record
                  -- stays the last.
                  local out, prev, added = {}, before, false
                  for z = j, k - 1 do
                    local t, u = struct.unpack('<I7I7', v, pq + 14 * z - 7)
                    if not added and t > now then
                      out[#out + 1], added = struct.pack('<I7I7', now, prev + c), true
                    end
                    prev = u
                    if added then
                      u = u + c
                    elseif t == now then
                      u, added = u + c, true
                    end
                    out[#out + 1] = struct.pack('<I7I7', t, u)
                  end
                  if not added then out[#out + 1] = struct.pack('<I7I7', now, prev + c) end
                  mid, lt = table.concat(out), nl
                end
                local hi = now
                if nl > now or c == 0 then hi = nl end
                exp = (hi + W) / 1000 -- ms, rounded up
                if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
                -- The cumulative counts start again from 0 before they leave the range
                -- doubles hold exactly (2^53: a counted exempt adds up to MAXUSED a
                -- window): every record less the base, the counts the same.
                local base = before
                if base >= 4503599627370496 / 2 then
                  local out = {}
                  for z = 1, #mid / 14 do
                    local t, u = struct.unpack('<I7I7', mid, 14 * z - 13)
                    out[z] = struct.pack('<I7I7', t, u - base)
                  end
                  mid, lc, base = table.concat(out), lc - base, 0
                end
                -- The entry, struct LOGENT: take.lua packs it here (ent); a fast script
                -- packs its set's whole value in one struct.pack from these values.
                ent = struct.pack('<c4I3I6I7c0I7I7', tag, 21 + #mid, exp, base, mid, lt, lc)
                used, reset = used + c, hi + W - now
                if plan then plan[#plan + 1] = 'L ' .. key .. ' ' .. tag .. ' ' .. sf('%d', now) .. ' ' .. sf('%d', c) end
              end
            else
              do
                local em, e = x[1], x[2]
                -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
                -- alg.Exempt): c is what this rule takes, none once it is there.
                local c = c
                if used + c > 4503599627370496 then
                  c = 4503599627370496 - used
                  if c < 0 then c = 0 end
                end
                used, reset, exp = used + c, e - now, em
                ent = struct.pack('<c4I3I6I7', tag, 7, exp, used)
                if plan then plan[#plan + 1] = 'F ' .. key .. ' ' .. tag .. ' ' .. sf('%d', exp) .. ' ' .. sf('%d', c) end
              end
            end
          end
          local sv = packv(raws[ki], vals[ki], {ent}, exp, nowms)
          raws[ki], vals[ki] = sv, unpackv(sv)
          built = built or {}
          built[ki] = true
          seededk = seededk or {}
          seededk[ki] = true
        elseif code == 'z' then
          -- A sliding log: seedu members at now (at most L: more would
          -- change nothing but the count), added by a take or reserve,
          -- allowed or denied, before its own (phase 2); until then as if
          -- there.
          local lg, W = logs[ki], tonumber(ARGV[b + 4])
          local u = math.min(seedu, L)
          used, reset, retry, flags = u, W, 0, 1
          if c > L then
            flags = 2
          elseif u + c > L then
            flags, retry = 0, W
          end
          if not lg.seedu or lg.seedu < u then lg.seedu = u end
          break
        else
          break -- (module codes: the encoder sends no seed with them)
        end
      end
      if fail then break end
      if flags ~= 1 and not (shadow and shadow[r]) then allowed = false end
      local o = 3 + (r - 1) * 4
      res[o], res[o + 1], res[o + 2], res[o + 3] = flags, used, reset, retry
    end
    if fail then
      reply = fail
      break
    end

    -- Overrides: a block denies, else an exempt admits (an uncounted one
    -- consuming nothing: nocount).
    local nocount
    if blk then
      allowed = false
    elseif ex then
      allowed, nocount = true, not ex[3]
    end

    -- Seeded state is stored by any take or reserve, allowed or denied
    -- (a denied one stores the carried units alone): the logs' seeded
    -- members now (the commit's own are named after them), the packed
    -- values after phase 2 where it did not write them.
    if consume then
      for ki, lg in pairs(logs) do
        if lg.seedu then
          local key = KEYS[kb + ki]
          local pre, seq = sf('%d', now), 0
          if lg.newest == now and string.sub(lg.top, 1, #pre) == pre then
            seq = tonumber(string.sub(lg.top, #pre + 2)) or 0
          end
          local za = {}
          for k = 1, lg.seedu do
            local q = sf('%d', seq + k)
            za[#za + 1] = pre
            za[#za + 1] = pre .. #q .. q
          end
          for k = 1, #za, 1998 do redis.call('ZADD', key, unpack(za, k, math.min(#za, k + 1997))) end
          lg.newest, lg.top = now, za[#za]
          local at = (now + lg.w) / 1000 -- ms, rounded up
          if at % 1 ~= 0 then at = at - at % 1 + 1 end
          redis.call('PEXPIREAT', key, sf('%d', at))
        end
      end
    end

    -- Phase 2: consume from every rule, only if all admit (a shadow rule
    -- only if it admits too).
    local plan
    local ours, tops = {}, {} -- key index -> the entries written there, their latest expiry
    if allowed and op == 'r' then plan = {sf('%d', now + tonumber(ARGV[ab + 14]))} end
    if allowed and consume and own then
      do
        -- redis-cell rules consume first: CL.THROTTLE decides again, in
        -- nanoseconds against its own clock, and may deny where its peek (whose
        -- remaining is truncated to whole µs) admitted. Then the cell rules
        -- already consumed get their exact previous TAT back (an integer string,
        -- the only value CL.THROTTLE can read) and the request is denied with
        -- nothing else written.
        local nsup, tatok = mods()
        local saved, out = {}, {}
        for r = 1, n do
          local b = ab + 20 + (r - 1) * 8
          -- A shadow rule that denied, or an uncounted exempt: not consumed.
          if ARGV[b + 1] == 'x' and not nocount and not (shadow and shadow[r] and res[3 + (r - 1) * 4] ~= 1) then
            local key, xs, L = KEYS[kb + tonumber(ARGV[b + 7])], st[r], tonumber(ARGV[b + 3])
            local tv = xs[4]
            saved[#saved + 1] = {key, tv, redis.call('PTTL', key)}
            local cr = redis.call('CL.THROTTLE', key, L - 1, xs[1], xs[2], c)
            local rem = tonumber(cr[3])
            if rem < 0 then rem = 0 elseif rem > L then rem = L end
            local o = 3 + (r - 1) * 4
            if tonumber(cr[1]) ~= 0 and shadow and shadow[r] then
              -- A shadow rule CL.THROTTLE denies now: reported so, never denying.
              saved[#saved] = nil
              res[o] = 0
            elseif tonumber(cr[1]) ~= 0 then
              for q = #saved - 1, 1, -1 do
                local sk, sv, sttl = saved[q][1], saved[q][2], saved[q][3]
                -- No TTL left (a peek on a fresh key leaves its TAT = now with
                -- a 0 ms TTL, visible until the script ends): as good as none.
                if sv and sttl > 0 then
                  redis.call('SET', sk, sv, 'PX', sttl)
                else
                  redis.call('DEL', sk)
                end
              end
              local ttl = 0
              if tv then ttl = math.max(nsup(tv) - now, 0) end
              res[o], res[o + 1], res[o + 3] = 0, L - rem, math.max(1, ttl + c * xs[3] - xs[3] * L)
              res[o + 2] = ttl
              allowed, out = false, nil
              break
            else
              local nv = redis.call('GET', key)
              out[#out + 1] = {o, L - rem, nsup(nv) - now}
              if plan then plan[#plan + 1] = 'x ' .. key .. ' ' .. sf('%d', c * xs[3] * 1000) end
            end
          end
        end
        if out then
          for _, q in ipairs(out) do res[q[1] + 1], res[q[1] + 2] = q[2], q[3] end
        end
      end
    end
    if allowed and consume then
      for r = 1, n do
        local b = ab + 20 + (r - 1) * 8
        local code = ARGV[b + 1]
        local L = tonumber(ARGV[b + 3])
        local tag = ARGV[b + 6]
        local ki = tonumber(ARGV[b + 7])
        local key = vkey(kb, nest, ki)
        local o = 3 + (r - 1) * 4
        local x = st[r]
        local used, reset = res[o + 1], res[o + 2]
        local ent, exp
        if nocount or (shadow and shadow[r] and res[o] ~= 1) then
          -- not consumed: reported as evaluated
        elseif code == 's' then
          local v = raws[ki]
          do
            -- The fast ways: the same cell gets c more, or a new cell c, the stored
            -- bytes copied around them; otherwise the cells are rebuilt from the
            -- oldest counted one holding units (or i) to the newest.
            local i, lo, K, s, list, top, newest, k, q = x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9]
            -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
            -- alg.Exempt): c is what this rule takes, none once it is there.
            local c = c
            if used + c > 4503599627370496 then
              c = 4503599627370496 - used
              if c < 0 then c = 0 end
            end
            local hi = i
            if newest > i then hi = newest end
            exp = (hi + K + 1) * s / 1000 -- ms, rounded up
            if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
            if not list and k > 0 and top == i then
              -- The entry's header and top and sum in one pack, the cells copied.
              local last = struct.unpack('<I7', v, q + 7 * (k + 1))
              ent = struct.pack('<c4I3I6I7I7', tag, 7 * (k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 7 * (k + 1) - 1) .. struct.pack('<I7', last + c)
            elseif not list and k > 0 and top < i then
              ent = struct.pack('<c4I3I6I7I7', tag, 7 * (i - top + k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 14 + 7 * k - 1) .. string.rep('\0', 7 * (i - top - 1)) .. struct.pack('<I7', c)
            else
              local first, jb = i, top - k
              if list or k > 0 then
                list = list or ints(v, q + 14, k)
                for z = math.max(1, lo - jb), k do
                  if list[z] > 0 then
                    first = math.min(first, jb + z)
                    break
                  end
                end
              end
              local out = {hi, used + c}
              for j = first, hi do
                local z, u = j - jb, 0
                if z >= 1 and z <= k then u = list[z] end
                if j == i then u = u + c end
                out[#out + 1] = u
              end
              local body = pints(out)
              ent = struct.pack('<c4I3I6', tag, #body, exp) .. body
            end
            -- None taken (saturated): reported as evaluated (a cell of 0 units
            -- holds none).
            if c > 0 then used, reset = used + c, (hi + K + 1) * s - now end
            if plan then
              plan[#plan + 1] = 'S ' .. key .. ' ' .. tag .. ' ' .. sf('%d', i) .. ' ' .. sf('%d', c) .. ' ' .. sf('%d', (i + K + 1) * s)
            end
          end
        elseif code == 'f' or code == 'c' then
          do
            local em, e = x[1], x[2]
            -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
            -- alg.Exempt): c is what this rule takes, none once it is there.
            local c = c
            if used + c > 4503599627370496 then
              c = 4503599627370496 - used
              if c < 0 then c = 0 end
            end
            used, reset, exp = used + c, e - now, em
            ent = struct.pack('<c4I3I6I7', tag, 7, exp, used)
            if plan then plan[#plan + 1] = 'F ' .. key .. ' ' .. tag .. ' ' .. sf('%d', exp) .. ' ' .. sf('%d', c) end
          end
        elseif code == 'g' then
          do
            local new, ttl, T, tol = x[1], x[2], x[3], x[4]
            local tat = now + new
            local left = tol - new
            local q = left / T
            q = q - q % 1
            if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
            if q < 0 then q = 0 elseif q > L then q = L end
            exp = tat / 1000
            if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
            used, reset = L - q, new
            ent = struct.pack('<c4I3I6I7', tag, 7, exp, tat)
            if plan then plan[#plan + 1] = 'G ' .. key .. ' ' .. tag .. ' ' .. sf('%d', new - ttl) .. ' ' .. sf('%d', tat) end
          end
        elseif code == 'l' then
          local v = raws[ki]
          local p, pl, pq = vals[ki][tag], nil, nil
          if p then
            local _
            _, pl, _, pq = struct.unpack('<c4I3I6', v, p)
          end
          do
            -- Trimmed to the window, c units at now added: the entry is base (before),
            -- the records kept but the last (mid, as stored), then the last record
            -- (lt µs, lc units), packed in one struct.pack (eval read every number it
            -- needs: commit reads none).
            local j, nl, before, top = x[1], x[2], x[3], x[4]
            -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
            -- alg.Exempt): c is what this rule takes, none once it is there.
            local c = c
            if used + c > 4503599627370496 then
              c = 4503599627370496 - used
              if c < 0 then c = 0 end
            end
            local W = tonumber(ARGV[b + 4])
            local k = 0
            if p then k = (pl - 7) / 14 end
            local mid, lt, lc = '', now, top + c -- none left in the window: one record at now
            if c == 0 then
              -- None taken (saturated, so j <= k): the records in the window kept.
              mid, lt = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8), nl
            elseif j <= k and nl == now then
              mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8)
            elseif j <= k and nl < now then
              mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k + 6)
            elseif j <= k then
              -- The server clock went back: c units at now, in order (added to a
              -- record at now), the later records' counts up by c; the newest record
              -- stays the last.
              local out, prev, added = {}, before, false
              for z = j, k - 1 do
                local t, u = struct.unpack('<I7I7', v, pq + 14 * z - 7)
                if not added and t > now then
                  out[#out + 1], added = struct.pack('<I7I7', now, prev + c), true
                end
                prev = u
                if added then
                  u = u + c
                elseif t == now then
                  u, added = u + c, true
                end
                out[#out + 1] = struct.pack('<I7I7', t, u)
              end
              if not added then out[#out + 1] = struct.pack('<I7I7', now, prev + c) end
              mid, lt = table.concat(out), nl
            end
            local hi = now
            if nl > now or c == 0 then hi = nl end
            exp = (hi + W) / 1000 -- ms, rounded up
            if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
            -- The cumulative counts start again from 0 before they leave the range
            -- doubles hold exactly (2^53: a counted exempt adds up to MAXUSED a
            -- window): every record less the base, the counts the same.
            local base = before
            if base >= 4503599627370496 / 2 then
              local out = {}
              for z = 1, #mid / 14 do
                local t, u = struct.unpack('<I7I7', mid, 14 * z - 13)
                out[z] = struct.pack('<I7I7', t, u - base)
              end
              mid, lc, base = table.concat(out), lc - base, 0
            end
            -- The entry, struct LOGENT: take.lua packs it here (ent); a fast script
            -- packs its set's whole value in one struct.pack from these values.
            ent = struct.pack('<c4I3I6I7c0I7I7', tag, 21 + #mid, exp, base, mid, lt, lc)
            used, reset = used + c, hi + W - now
            if plan then plan[#plan + 1] = 'L ' .. key .. ' ' .. tag .. ' ' .. sf('%d', now) .. ' ' .. sf('%d', c) end
          end
        elseif code == 'z' then
          local lg = logs[ki]
          do
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
              redis.call('PEXPIREAT', key, sf('%d', at))
              if plan then plan[#plan + 1] = 'l ' .. key .. ' ' .. ms end
            end
            used, reset = used + c, tonumber(ARGV[b + 4])
          end
        elseif code == 't' or code == 'h' then
          do
            -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
            -- alg.Exempt): c is what this rule takes, none once it is there.
            local c = c
            if used + c > 4503599627370496 then
              c = 4503599627370496 - used
              if c < 0 then c = 0 end
            end
            local fld, leaves, cs = sf('%d', x[1]), x[2], sf('%d', c)
            if c == 0 then
              -- none taken (saturated): reported as evaluated
            elseif code == 't' then
              -- EXHINCRBY without a TTL option (EX/PX/PXAT replicate a wrong TTL,
              -- and the bare increment removes the TTL), then EXHPEXPIREAT: the
              -- field lives SLACKMS past the last ms the cell counts, (i+K+1)*s - 1
              -- (TairHash expires it by its own clock, later than this TIME).
              redis.call('EXHINCRBY', key, fld, cs)
              redis.call('EXHPEXPIREAT', key, fld, sf('%d', math.floor(leaves / 1000) - 1 + 1000))
            else
              -- HINCRBY keeps a field's TTL; NX sets it on the cell's first unit.
              -- Absolute, one ms after the cell stops counting, (i+K+1)*s: never
              -- before.
              redis.call('HINCRBY', key, fld, cs)
              redis.call('HPEXPIREAT', key, sf('%d', math.floor(leaves / 1000)), 'NX', 'FIELDS', 1, fld)
            end
            if plan then plan[#plan + 1] = code .. ' ' .. key .. ' ' .. fld .. ' ' .. cs .. ' ' .. sf('%d', leaves) end
            if c > 0 then used, reset = used + c, leaves - now end
          end
        end
        res[o + 1], res[o + 2] = used, reset
        if ent then
          local l = ours[ki]
          if not l then
            ours[ki], tops[ki] = {ent}, exp
          else
            l[#l + 1] = ent
            if exp > tops[ki] then tops[ki] = exp end
          end
        end
      end
      -- A new hold marks every packed value and log it has units in with
      -- the earliest lapse of the holds there (in ms, rounded down: a marker
      -- at or before now means one may have lapsed).
      local at
      if plan then at = math.floor(tonumber(plan[1]) / 1000) end
      if at then
        for ki, list in pairs(ours) do
          local m, mat = vals[ki], at
          if m[MARK] then
            local _, _, exp = struct.unpack('<c4I3I6', raws[ki], m[MARK])
            if exp < mat then mat = exp end
          end
          list[#list + 1] = struct.pack('<c4I3I6', MARK, 0, mat)
        end
      end
      if plan then
        local H = holds(now)
        for ki, lg in pairs(logs) do
          local mat = at
          if lg.mark and lg.mark < mat then mat = lg.mark end
          H.logMark(KEYS[kb + ki], lg, mat)
        end
        local hkey = KEYS[kb + hk]
        redis.call('HSET', hkey, ARGV[ab + 13], table.concat(plan, '\n'))
        local ttl = tonumber(ARGV[ab + 15])
        if redis.call('PTTL', hkey) < ttl then redis.call('PEXPIRE', hkey, ttl) end
      end
    end
    -- Seeded values not written above are written whole.
    if seededk and consume then
      for ki in pairs(seededk) do
        if not ours[ki] then ours[ki], tops[ki] = {}, 0 end
      end
    end
    -- The writes: a nested set's new value becomes its section (secs: root
    -- key index -> {id -> section}), written with its root's value; the
    -- others in place (SETRANGE, the TTL kept) when the new entries have
    -- the old ones' places, lengths and expiries and nothing else is stored
    -- (the same window, the same cell, as most decisions), else whole.
    local secs
    for ki, list in pairs(ours) do
      local ns = nest and nest[ki]
      if ns then
        local sv, top = packv(raws[ki], vals[ki], list, tops[ki], nowms)
        secs = secs or {}
        secs[ns[1]] = secs[ns[1]] or {}
        secs[ns[1]][ns[3]] = section(ns[3], sv, top)
      end
    end
    for ki, list in pairs(ours) do
      if not (nest and nest[ki]) then
        local m, raw, pos = vals[ki], raws[ki], 2
        local sc = secs and secs[ki]
        if raw and #list > 0 and not sc and not (built and built[ki]) then
          for e = 1, #list do
            local ent = list[e]
            local _, len, exp = struct.unpack('<c4I3I6', ent, 1)
            if m[string.sub(ent, 1, 4)] ~= pos then
              pos = nil
              break
            end
            local _, olen, oexp = struct.unpack('<c4I3I6', raw, pos)
            if olen ~= len or oexp ~= exp then
              pos = nil
              break
            end
            pos = pos + 13 + len
          end
        end
        if raw and #list > 0 and not sc and not (built and built[ki]) and pos == #raw + 1 then
          redis.call('SETRANGE', KEYS[kb + ki], 1, table.concat(list))
        else
          local v, top = packv(raw, m, list, tops[ki], nowms, sc)
          if top > 0 then redis.call('SET', KEYS[kb + ki], v, 'PXAT', sf('%d', top)) end
        end
        if sc then secs[ki] = nil end
      end
    end
    for ri, sc in pairs(secs or NONE) do -- roots without entries of their own written
      local v, top = packv(raws[ri], vals[ri], {}, 0, nowms, sc)
      redis.call('SET', KEYS[kb + ri], v, 'PXAT', sf('%d', top))
    end
    for ki in pairs(ours) do
      local ns = nest and nest[ki]
      if ns and ns[4] then redis.call('DEL', KEYS[kb + ki]) end -- imported (Options.Upgrade)
    end
    res[1] = allowed and 1 or 0

    -- The denial trail, same atomic step: one entry per denying rule of a
    -- denied attempt (not under a block: the block's entry instead), and
    -- per denying shadow rule, allowed or not (flags 2).
    if consume and (not allowed or shadow) and tk > 0 and tonumber(ARGV[ab + 8]) > 0 then
      local tkey = KEYS[kb + tk]
      local tv = ARGV[ab + 11]
      if tv ~= '' then tv = '|' .. tv end
      local ent = {}
      for r = n, 1, -1 do
        local o = 3 + (r - 1) * 4
        local fl = res[o]
        local sh = shadow and shadow[r]
        if fl ~= 1 and (sh or (not allowed and not blk)) then
          local b = ab + 20 + (r - 1) * 8
          local fg = fl == 2 and 1 or 0
          if sh then fg = fg + 2 end
          ent[#ent + 1] = sf(TRAIL, now, ARGV[ab + 10], ARGV[b + 2],
            res[o + 1], (lim and lim[r]) or ARGV[b + 3], c, res[o + 3], fg) .. tv
        end
      end
      if blk then
        local ra = 0
        if blk[3] > 0 then ra = blk[3] - now end
        ent[#ent + 1] = sf(TRAIL, now, ARGV[ab + 10], sf('%d', blk[1]), 0, 0, c, ra, 4) .. tv
      end
      if #ent > 0 then pushTrail(tkey, ent, tonumber(ARGV[ab + 8]), ARGV[ab + 9]) end
    end

    -- The reply: the rules' four numbers as bytes (struct '<Bi7i7i7' per
    -- rule: one string, not 4 integers a rule, for both sides to convert).
    local bin = ''
    if n > 0 then bin = struct.pack('<' .. string.rep(string.sub('<Bi7i7i7', 2), n), unpack(res, 3, 2 + 4 * n)) end
    -- out is the reply: {allowed, now, bin, [override], trail entries…}.
    local out = {res[1], now, bin}
    local ovs = '' -- the override element, stored in the record too
    if ov then
      local ls = {}
      for r = 1, n do
        ls[r] = (lim and lim[r]) or ARGV[ab + 20 + (r - 1) * 8 + 3]
        if type(ls[r]) == 'number' then ls[r] = sf('%d', ls[r]) end
      end
      ovs = sf('%d', ov[1]) .. '|' .. table.concat(ls, ',') .. '|' .. ov[2]
      out[1], out[4] = out[1] + 4, ovs
    end

    -- Store the decision for retries of the same attempt, in the same
    -- step (the record read above): with an override (first element >=
    -- 4), its element after the rules' bytes, RECLEN length then bytes.
    if ik > 0 and consume then
      local hid = ''
      if op == 'r' and allowed then hid = ARGV[ab + 13] end
      local ovr = ''
      if ov then ovr = struct.pack('<I2', #ovs) .. ovs end
      redis.call('SET', KEYS[kb + ik], '\002' .. struct.pack('<Bi7I2', out[1], now, #bin) .. bin .. ovr .. hid, 'PX', ARGV[ab + 12])
    end

    if op == 'i' and tk > 0 then
      local tr = redis.call('LRANGE', KEYS[kb + tk], 0, tonumber(ARGV[ab + 8]) - 1)
      local at = #out
      for k = 1, #tr do out[at + k] = tr[k] end
    end
    reply = out
  until true
  if attempts == 1 then return reply end
  replies[a] = reply
  kb = kb + nk
  ab = ab + 20 + n * 8
end
return replies

