-- The decide script of the one-key-per-rule layout (freqcap at commit
-- 87f5b6f: lua/refund.lua then lua/take.lua), kept to test upgrades
-- (TestUpgradeReadsThrough): it writes state the way deployed versions do.
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

-- take.lua: one decision over every rule of a request, all-or-nothing.
-- (refund.lua is prepended: refund, entries, entrykey, chunked.)
--
-- KEYS[1..n]   rule state keys, in rule order
-- KEYS[tk]     the denial trail (list), when ARGV[4] > 0
-- KEYS[hk]     the holds (hash), when ARGV[5] > 0
--
-- ARGV[1]  op: t take, p peek, r reserve, i inspect (peek of 1 + trail)
-- ARGV[2]  cost (>= 1)
-- ARGV[3]  n, the number of rules
-- ARGV[4]  tk: index of the trail key in KEYS, 0 = none
-- ARGV[5]  hk: index of the hold key in KEYS, 0 = none
-- ARGV[6]  trail: max entries (0: none written; op i: 0 reads all)
-- ARGV[7]  trail: TTL, ms
-- ARGV[8]  policy name (for trail entries)
-- op r only: ARGV[9] hold id, ARGV[10] hold lifetime µs, ARGV[11] hold
--            key TTL ms
-- then 5 per rule: alg, name, limit, p1, p2 where alg is
--   f  fixed window, epoch-aligned:  p1 = window µs
--   c  calendar fixed window:        p1 = consecutive boundaries, ms, comma-separated
--   s  sliding window counters:      p1 = K, the cells counted behind the
--                                    current one, p2 = cell µs (driver.CellSpan)
--   t  sliding window on TairHash:   as s; the key is a TairHash, one field
--                                    per cell with its own expiry
--   h  sliding window on native hash-field expiry (Redis >= 7.4): as s
--   l  sliding log:                  p1 = window µs
--   g  GCRA:                         limit = burst+1, p1 = emission interval T
--                                    µs, p2 = tolerance T*limit µs (integers:
--                                    driver.Rule.GCRAParams)
--   x  GCRA on redis-cell:           limit = burst+1, p1 = emission interval T
--                                    µs, p2 = "<count>:<period s>" for
--                                    CL.THROTTLE (count/period = 1/T exactly)
-- unused p's are sent as "0". Keys of t, h and x rules are never touched by
-- another algorithm code (the backend gives them their own key suffix).
-- then, after the rules (index ib = the rules' end):
-- ARGV[ib+1]  ik: index of the idempotency record key in KEYS, 0 = none
--             (ops t and r only)
-- ARGV[ib+2]  the record's TTL, ms
-- ARGV[ib+3]  trail: the attempt's values (driver.Request.TrailValues,
--             opaque, never holding '|'), "" = none
--
-- Reply: array {allowed 0|1, now µs, then 4 integers per rule:
--   flags (1 = allowed, 2 = cost too high), used, reset-after µs,
--   retry-after µs; then (op i) the trail entries, newest first, strings
--   "at µs|policy|rule|used|limit|cost|retry µs|ctl 0|1", then
--   "|values" when ARGV[ib+3] is not empty}.
-- The caller knows each rule's limit, hence remaining = max(0, limit-used).
-- A replay (a live idempotency record exists) returns the stored reply
-- with 2 added to its first element and the original hold id ("" for a
-- take) appended; nothing else happens.
-- Errors: redis.error_reply with a "freqcap:" message (never naming a
-- key: keys hold subject values). Among them: the key of a g or x rule
-- holds something other than a TAT, checked before anything is written
-- and before any CL.THROTTLE call (which would abort the server).

-- GCRA (g, x) is computed in exact integers relative to now, in µs: T and
-- tol are integers, so are ttl = max(TAT-now, 0), ttl + c*T and retry;
-- doubles hold integers exactly below 2^53 (the backend bounds tol), and
-- only a division needs care.

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

-- gcrarem is GCRA's Remaining, floor(left/T) clamped to [0, L], where
-- left = tol - ttl.
local function gcrarem(left, T, L)
  local q = fdiv(left, T)
  if q < 0 then return 0 elseif q > L then return L end
  return q
end

-- nsup turns a redis-cell TAT (ns since the epoch, an integer string too
-- long for a double; tatok) into µs, rounded up.
local function nsup(v)
  local us = tonumber(string.sub(v, 1, -4)) or 0
  if string.sub(v, -3) ~= string.rep('0', math.min(#v, 3)) then us = us + 1 end
  return us
end

-- foreign returns an error reply when key, the state key of GCRA rule
-- name (alg g or x), holds anything but a TAT (tatok; g: µs below 2^53),
-- else nil. It reads with pcall: a key of another type (WRONGTYPE) is
-- refused the same way. The reply names the rule, never the key.
local function foreign(key, alg, name)
  local v = redis.pcall('GET', key)
  local bad
  if type(v) == 'table' and v.err then
    bad = 'is not a string key (WRONGTYPE)'
  elseif v and alg == 'x' and not tatok(v) then
    bad = 'holds a value CL.THROTTLE did not write (it would abort the server on it)'
  elseif v and alg == 'g' and not (tatok(v) and tonumber(v) < 9007199254740992) then
    bad = 'holds a value that is not a TAT in µs'
  end
  if bad then
    return redis.error_reply('freqcap: rule ' .. name .. ': the GCRA state key ' .. bad .. '; not evaluated, nothing written (delete the key or reset the subject)')
  end
end

local op = ARGV[1]
local n = tonumber(ARGV[3])
local tk = tonumber(ARGV[4])
local hk = tonumber(ARGV[5])
local A = 8 -- ARGV index before the first rule's
if op == 'r' then A = 11 end

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]

-- Idempotency: a live record means this attempt was decided before.
local ib = A + n * 5
local ik = tonumber(ARGV[ib + 1]) or 0
if ik > 0 then
  local rec = redis.call('GET', KEYS[ik])
  if rec then
    local sep = string.find(rec, '|', 1, true)
    local out = {}
    for v in string.gmatch(string.sub(rec, sep + 1), '[^,]+') do out[#out + 1] = tonumber(v) end
    out[1] = out[1] + 2
    out[#out + 1] = string.sub(rec, 1, sep - 1)
    return out
  end
end

-- GCRA state keys hold a TAT or nothing: checked before anything is
-- written, and before any CL.THROTTLE call.
for r = 1, n do
  local b = A + (r - 1) * 5
  local alg = ARGV[b + 1]
  if alg == 'g' or alg == 'x' then
    local e = foreign(KEYS[r], alg, ARGV[b + 2])
    if e then return e end
  end
end

-- Lapsed holds first: refund them (only on keys this call names).
if hk > 0 then
  local hkey = KEYS[hk]
  local h = redis.call('HGETALL', hkey)
  if #h > 0 then
    local named
    for i = 1, #h, 2 do
      if op == 'r' and h[i] == ARGV[9] then
        return redis.error_reply('freqcap: hold id already in use')
      end
      local exp, list = entries(h[i + 1])
      if exp <= now then
        if not named then
          named = {}
          for k = 1, #KEYS do named[KEYS[k]] = true end
        end
        local rest = {}
        for _, e in ipairs(list) do
          if named[entrykey(e)] then refund(e, now) else rest[#rest + 1] = e end
        end
        if #rest == 0 then
          redis.call('HDEL', hkey, h[i])
        elseif #rest < #list then
          redis.call('HSET', hkey, h[i], string.format('%d', exp) .. '\n' .. table.concat(rest, '\n'))
        end
      end
    end
  end
end

local c = 1
if op ~= 'i' then c = tonumber(ARGV[2]) end
local consume = op == 't' or op == 'r'

-- Phase 1: evaluate every rule, writing nothing. res holds the reply;
-- st[r] what phase 2 needs of rule r.
local res = {0, now}
local st = {}
local allowed = true
for r = 1, n do
  local b = A + (r - 1) * 5
  local alg = ARGV[b + 1]
  local L = tonumber(ARGV[b + 3])
  local key = KEYS[r]
  local used, reset, retry, flags = 0, 0, 0, 1
  if alg == 's' or alg == 't' or alg == 'h' then
    -- Strict (driver.CellSpan): at cell i = floor(now/s) the cells
    -- j >= i-K count, the partly expired oldest one too, so no interval
    -- of the window ever holds more than L units; cell j stops counting
    -- at leaves(j) = (j+K+1)*s.
    local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    local function leaves(j) return (j + K + 1) * s end
    local i = math.floor(now / s)
    local lo = i - K -- counted cells j: lo <= j
    -- Cells are counted by index, never by expiry: t and h fields expire
    -- by themselves (EXHGETALL/HGETALL skip expired ones), but against
    -- clocks other than this TIME, so expiry only reclaims memory.
    local h
    if alg == 't' then h = redis.call('EXHGETALL', key) else h = redis.call('HGETALL', key) end
    local newest, cur, dead = -1, 0, nil
    for k = 1, #h, 2 do
      local j = tonumber(h[k])
      if j and j >= lo then
        local v = tonumber(h[k + 1])
        used = used + v
        if j == i then cur = v end
        if v > 0 and j > newest then newest = j end
      elseif alg == 's' then
        dead = dead or {}
        dead[#dead + 1] = h[k]
      end
    end
    if newest >= 0 then reset = leaves(newest) - now end
    if c > L then
      flags = 2
    elseif used + c > L then
      flags = 0
      local need, acc = used + c - L, 0
      local cells = {}
      for k = 1, #h, 2 do
        local j = tonumber(h[k])
        if j and j >= lo then cells[j] = tonumber(h[k + 1]) end
      end
      for j = lo, i do
        acc = acc + (cells[j] or 0)
        if acc >= need then
          retry = leaves(j) - now
          break
        end
      end
      if retry == 0 then retry = s end -- cells beyond i: the server clock went back
    end
    st[r] = {i, cur, leaves(i), dead}
  elseif alg == 'f' or alg == 'c' then
    local e
    if alg == 'f' then
      local W = tonumber(ARGV[b + 4])
      e = now - now % W + W
    else
      local prev
      for v in string.gmatch(ARGV[b + 4], '%d+') do
        local bu = tonumber(v) * 1000
        if bu > now then
          if prev then e = bu end
          break
        end
        prev = bu
      end
      if not e then
        return redis.error_reply('freqcap: calendar boundaries do not cover the server time (clock skew?)')
      end
    end
    local em = math.ceil(e / 1000)
    local live = redis.call('PEXPIRETIME', key) == em
    if live then used = tonumber(redis.call('GET', key)) or 0 end
    if used > 0 then reset = e - now end
    if c > L then
      flags = 2
    elseif used + c > L then
      flags, retry = 0, e - now
    end
    st[r] = {em, live, e}
  elseif alg == 'l' then
    local W = tonumber(ARGV[b + 4])
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - W))
    used = redis.call('ZCARD', key)
    local top, newest
    if used > 0 then
      local z = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      top, newest = z[1], tonumber(z[2])
      reset = newest + W - now
    end
    if c > L then
      flags = 2
    elseif used + c > L then
      flags = 0
      local need = used + c - L
      local z = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
      retry = tonumber(z[2]) + W - now
    end
    st[r] = {W, top, newest}
  elseif alg == 'g' then
    -- Relative to now: ttl = max(TAT-now, 0), new = ttl + c*T (the TAT
    -- after admitting, minus now); admitted iff new <= tol.
    local T, tol = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    local v = redis.call('GET', key)
    local ttl = 0
    if v then ttl = math.max(tonumber(v) - now, 0) end
    local new = ttl
    if c > L then
      flags = 2
    else
      new = ttl + c * T
      if new > tol then flags, retry = 0, new - tol end
    end
    used, reset = L - gcrarem(tol - ttl, T, L), ttl
    st[r] = {new, ttl, T, tol}
  elseif alg == 'x' then
    -- redis-cell decides (CL.THROTTLE with quantity 0 peeks: it writes
    -- and creates nothing); the numbers it rounds to whole seconds are
    -- computed here from its TAT instead, never shorter than the truth.
    local T = tonumber(ARGV[b + 4]) -- µs
    local cnt, per = string.match(ARGV[b + 5], '^(%d+):(%d+)$')
    local v = redis.call('GET', key) -- a TAT or nothing (foreign)
    local pk = redis.call('CL.THROTTLE', key, L - 1, cnt, per, 0)
    local ttl = 0
    if v then ttl = math.max(nsup(v) - now, 0) end
    local rem = tonumber(pk[3])
    if c > L then
      flags = 2
    elseif rem < c then
      flags, retry = 0, math.max(1, ttl + c * T - T * L)
    end
    if rem < 0 then rem = 0 elseif rem > L then rem = L end
    used, reset = L - rem, ttl
    st[r] = {cnt, per, T, v} -- v: the TAT before this script, for a late denial
  else
    return redis.error_reply('freqcap: unknown algorithm code ' .. tostring(alg))
  end
  if flags ~= 1 then allowed = false end
  local o = 3 + (r - 1) * 4
  res[o], res[o + 1], res[o + 2], res[o + 3] = flags, used, reset, retry
end

-- Phase 2: consume from every rule, only if all admit.
local plan
if allowed and consume and op == 'r' then plan = {string.format('%d', now + tonumber(ARGV[10]))} end

-- redis-cell rules consume first: CL.THROTTLE decides again, in
-- nanoseconds against its own clock, and may deny where its peek (whose
-- remaining is truncated to whole µs) admitted. Then the cell rules
-- already consumed get their exact previous TAT back (an integer string,
-- the only value CL.THROTTLE can read) and the request is denied with
-- nothing else written.
if allowed and consume then
  local saved, out = {}, {}
  for r = 1, n do
    local b = A + (r - 1) * 5
    if ARGV[b + 1] == 'x' then
      local key, x, L = KEYS[r], st[r], tonumber(ARGV[b + 3])
      local v = x[4]
      saved[#saved + 1] = {key, v, redis.call('PTTL', key)}
      local cr = redis.call('CL.THROTTLE', key, L - 1, x[1], x[2], c)
      local rem = tonumber(cr[3])
      if rem < 0 then rem = 0 elseif rem > L then rem = L end
      local o = 3 + (r - 1) * 4
      if tonumber(cr[1]) ~= 0 then
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
        if v then ttl = math.max(nsup(v) - now, 0) end
        res[o], res[o + 1], res[o + 3] = 0, L - rem, math.max(1, ttl + c * x[3] - x[3] * L)
        res[o + 2] = ttl
        allowed, out = false, nil
        break
      end
      local nv = redis.call('GET', key)
      out[#out + 1] = {o, L - rem, nsup(nv) - now}
      if plan then plan[#plan + 1] = 'x ' .. key .. ' ' .. string.format('%d', c * x[3] * 1000) end
    end
  end
  if out then
    for _, e in ipairs(out) do res[e[1] + 1], res[e[1] + 2] = e[2], e[3] end
  end
end

if allowed and consume then
  local cs = string.format('%d', c)
  for r = 1, n do
    local b = A + (r - 1) * 5
    local alg = ARGV[b + 1]
    local key = KEYS[r]
    local o = 3 + (r - 1) * 4
    local x = st[r]
    if alg == 't' then
      -- EXHINCRBY without a TTL option (EX/PX/PXAT replicate a wrong TTL,
      -- and the bare increment removes the TTL), then EXHPEXPIREAT: the
      -- field lives to the last ms the cell counts, (i+K+1)*s - 1.
      local f = string.format('%d', x[1])
      redis.call('EXHINCRBY', key, f, cs)
      redis.call('EXHPEXPIREAT', key, f, string.format('%d', math.floor(x[3] / 1000) - 1))
      res[o + 1], res[o + 2] = res[o + 1] + c, x[3] - now
      if plan then plan[#plan + 1] = 't ' .. key .. ' ' .. f .. ' ' .. cs .. ' ' .. string.format('%d', x[3]) end
    elseif alg == 'h' then
      -- HINCRBY keeps a field's TTL; NX sets it on the cell's first unit.
      -- Absolute, one ms after the cell stops counting, (i+K+1)*s: never
      -- before.
      local f = string.format('%d', x[1])
      redis.call('HINCRBY', key, f, cs)
      redis.call('HPEXPIREAT', key, string.format('%d', math.floor(x[3] / 1000)), 'NX', 'FIELDS', 1, f)
      res[o + 1], res[o + 2] = res[o + 1] + c, x[3] - now
      if plan then plan[#plan + 1] = 's ' .. key .. ' ' .. f .. ' ' .. cs .. ' ' .. string.format('%d', x[3]) end
    elseif alg == 's' then
      local f = string.format('%d', x[1])
      if x[4] then chunked('HDEL', key, x[4], 1, 1) end
      redis.call('HINCRBY', key, f, cs)
      if x[2] == 0 then
        -- A new cell: the key lives until this cell stops counting,
        -- (i+K+1)*s, plus one cell.
        redis.call('PEXPIREAT', key, string.format('%d', math.ceil((x[3] + tonumber(ARGV[b + 5])) / 1000)))
      end
      res[o + 1], res[o + 2] = res[o + 1] + c, x[3] - now
      if plan then plan[#plan + 1] = 's ' .. key .. ' ' .. f .. ' ' .. cs .. ' ' .. string.format('%d', x[3]) end
    elseif alg == 'f' or alg == 'c' then
      if x[2] then
        redis.call('INCRBY', key, cs)
      else
        redis.call('SET', key, cs, 'PXAT', string.format('%d', x[1]))
      end
      res[o + 1], res[o + 2] = res[o + 1] + c, x[3] - now
      if plan then plan[#plan + 1] = 'f ' .. key .. ' ' .. string.format('%d', x[1]) .. ' ' .. cs end
    elseif alg == 'l' then
      local W = x[1]
      local pre = string.format('%d', now)
      local seq = 0
      if x[3] == now and string.sub(x[2], 1, #pre) == pre then
        -- members at this µs exist already (the newest sorts highest):
        -- continue after it.
        seq = tonumber(string.sub(x[2], #pre + 2)) or 0
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
      redis.call('PEXPIREAT', key, string.format('%d', math.ceil((now + W) / 1000)))
      res[o + 1], res[o + 2] = res[o + 1] + c, W
      if plan then plan[#plan + 1] = 'l ' .. key .. ' ' .. table.concat(ms, ',') end
    elseif alg == 'g' then
      -- The absolute TAT now+new, in µs, as an integer string.
      local new, T, tol = x[1], x[3], x[4]
      local tat = now + new
      redis.call('SET', key, string.format('%d', tat), 'PXAT', string.format('%d', math.ceil(tat / 1000)))
      res[o + 1], res[o + 2] = tonumber(ARGV[b + 3]) - gcrarem(tol - new, T, tonumber(ARGV[b + 3])), new
      if plan then plan[#plan + 1] = 'g ' .. key .. ' ' .. string.format('%d', new - x[2]) end
    end
  end
  if plan then
    local hkey = KEYS[hk]
    redis.call('HSET', hkey, ARGV[9], table.concat(plan, '\n'))
    local ttl = tonumber(ARGV[11])
    if redis.call('PTTL', hkey) < ttl then redis.call('PEXPIRE', hkey, ttl) end
  end
end
res[1] = allowed and 1 or 0

-- The denial trail: one entry per denying rule, same atomic step.
if not allowed and consume and tk > 0 and tonumber(ARGV[6]) > 0 then
  local tkey = KEYS[tk]
  local at = string.format('%d', now)
  local tv = ARGV[ib + 3] or ''
  if tv ~= '' then tv = '|' .. tv end
  local ent = {}
  for r = n, 1, -1 do
    local o = 3 + (r - 1) * 4
    local fl = res[o]
    if fl ~= 1 then
      local b = A + (r - 1) * 5
      ent[#ent + 1] = string.format('%s|%s|%s|%d|%s|%d|%d|%d', at, ARGV[8], ARGV[b + 2],
        res[o + 1], ARGV[b + 3], c, res[o + 3], fl / 2) .. tv
    end
  end
  redis.call('LPUSH', tkey, unpack(ent))
  redis.call('LTRIM', tkey, 0, tonumber(ARGV[6]) - 1)
  redis.call('PEXPIRE', tkey, ARGV[7])
end

-- Store the decision for retries of the same attempt, in the same step.
if ik > 0 and consume then
  local parts = {}
  for k = 1, #res do parts[k] = string.format('%d', res[k]) end
  local hid = ''
  if op == 'r' and allowed then hid = ARGV[9] end
  redis.call('SET', KEYS[ik], hid .. '|' .. table.concat(parts, ','), 'PX', ARGV[ib + 2])
end

if op == 'i' and tk > 0 then
  local tr = redis.call('LRANGE', KEYS[tk], 0, tonumber(ARGV[6]) - 1)
  for k = 1, #tr do res[#res + 1] = tr[k] end
end
return res
