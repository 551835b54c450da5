-- take.lua: the decide script's frame. One EVALSHA decides one or more
-- attempts in order, each over all its rules, all-or-nothing. (lua.go
-- puts prelude.lua, the algorithm fragments of alg/ and holds.lua first;
-- backends/redis/wire.go writes what this reads.)
--
-- ARGV[1]  m, the number of attempts; then each attempt's arguments, from
-- offset a (the first attempt: a = 1), naming its keys from offset k
-- (the first: k = 0) as "index i" = KEYS[k+i]:
-- ARGV[a+1]   op: t take, p peek, r reserve, i inspect (peek of 1 + trail)
-- ARGV[a+2]   cost (>= 1)
-- ARGV[a+3]   n, the number of rules
-- ARGV[a+4]   nk, the number of keys of this attempt
-- ARGV[a+5]   tk: index of the trail (list), 0 = none
-- ARGV[a+6]   hk: index of the reservations (hash), 0 = none
-- ARGV[a+7]   ik: index of the idempotency record, 0 = none (ops t, r)
-- ARGV[a+8]   trail: max entries (0: none written; op i: 0 reads all)
-- ARGV[a+9]   trail: TTL, ms
-- ARGV[a+10]  policy name (trail entries)
-- ARGV[a+11]  trail: the attempt's values (driver.Request.TrailValues,
--             opaque, never holding '|'), "" = none
-- ARGV[a+12]  the idempotency record's TTL, ms
-- ARGV[a+13]  op r: hold id; ARGV[a+14] its lifetime µs; ARGV[a+15] the
--             reservations key's TTL, ms
-- then 7 per rule: code, name, limit, p1, p2, tag, ki (the index of the
-- rule's state key), where code is
--   f  fixed window, epoch-aligned   packed   (alg/fixed.lua)
--   c  calendar fixed window         packed   (alg/fixed.lua)
--   s  sliding window counters       packed   (alg/sliding.lua)
--   g  GCRA                          packed   (alg/gcra.lua)
--   l  sliding log                   the dimension set's log (alg/log.lua)
--   t  sliding window on TairHash    own key  (alg/modsliding.lua)
--   h  sliding window on native hash-field expiry  own key
--   x  GCRA on redis-cell            own key  (alg/cell.lua)
-- Packed rules (prelude.lua) sharing a key are read with one GET and
-- written with one SET; tag identifies the rule's entry there ("" for the
-- others). Unused p's are "0".
--
-- Reply, per attempt: {allowed 0|1, now µs, then 4 integers per rule:
--   flags (1 = allowed, 2 = cost too high), used, reset-after µs,
--   retry-after µs; then (op i) the trail entries, newest first, strings
--   "at µs|policy|rule|used|limit|cost|retry µs|ctl 0|1", then
--   "|values" when ARGV[a+11] is not empty}.
-- The caller knows each rule's limit, hence remaining = max(0, limit-used).
-- A replay (a live idempotency record exists) returns the stored reply
-- with 2 added to its first element and the original hold id ("" for a
-- take) appended; nothing else happens.
-- One attempt (m = 1): the script's reply is the attempt's. Several: an
-- array of them, where an attempt that failed is an error element.
-- Errors: redis.error_reply with a "freqcap:" message (never naming a
-- key: keys hold subject values), returned before the attempt writes
-- anything. Among them: a state key holding a value freqcap did not write
-- (CL.THROTTLE would abort the server on a foreign redis-cell key).

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local nowms = math.floor(now / 1000)
local HA, RA = 15, 7 -- ARGV per attempt header, per rule
local packed = {f = true, c = true, s = true, g = true}

local function foreign(name, what)
  return redis.error_reply('freqcap: rule ' .. name .. ': ' .. what .. '; not evaluated, nothing written (delete the key or reset the subject)')
end

local function decide(kb, ab)
  local op = ARGV[ab + 1]
  local n = tonumber(ARGV[ab + 3])
  local nk = tonumber(ARGV[ab + 4])
  local tk, hk, ik = tonumber(ARGV[ab + 5]), tonumber(ARGV[ab + 6]), tonumber(ARGV[ab + 7])
  local function key(i) return KEYS[kb + i] end

  -- Idempotency: a live record means this attempt was decided before.
  if ik > 0 then
    local rec = redis.call('GET', key(ik))
    if rec then
      local sep = string.find(rec, '|', 1, true)
      local out = {}
      for v in string.gmatch(string.sub(rec, sep + 1), '[^,]+') do out[#out + 1] = tonumber(v) end
      out[1] = out[1] + 2
      out[#out + 1] = string.sub(rec, 1, sep - 1)
      return out
    end
  end

  local rules = {}
  local modules = false -- a rule with a key of its own (t, h, x)
  for r = 1, n do
    local b = ab + HA + (r - 1) * RA
    local ru = {code = ARGV[b + 1], name = ARGV[b + 2], L = tonumber(ARGV[b + 3]), p1 = ARGV[b + 4],
      p2 = ARGV[b + 5], tag = ARGV[b + 6], ki = tonumber(ARGV[b + 7])}
    rules[r] = ru
    if not packed[ru.code] and ru.code ~= 'l' then modules = true end
  end
  local x = {now = now, key = key}

  -- read: every packed value once, every log once (trimmed), and every
  -- redis-cell key checked, before anything is written.
  local function read()
    local vals, raws, logs, lw = {}, {}, {}, {}
    for r = 1, n do
      local ru = rules[r]
      local k = ru.ki
      if packed[ru.code] then
        if not vals[k] then
          local v = redis.pcall('GET', key(k))
          local m
          if type(v) ~= 'table' then m = unpackv(v) end
          if not m then return foreign(ru.name, 'its state key holds a value freqcap did not write') end
          vals[k], raws[k] = m, v or ''
        end
      elseif ru.code == 'l' then
        local w = tonumber(ru.p1)
        if not lw[k] then lw[k] = {w, ru.name} elseif lw[k][1] < w then lw[k][1] = w end
      elseif ru.code == 'x' then
        local e, v = cellForeign(key(k), ru.name)
        if e then return e end
        ru.tat = v
      end
    end
    for k, w in pairs(lw) do
      local lg, e = logRead(key(k), w[1], now, w[2])
      if not lg then return e end
      logs[k] = lg
    end
    x.vals, x.raws, x.logs = vals, raws, logs
  end
  local e = read()
  if e then return e end

  -- Lapsed reservations first: their units go back (only on keys this
  -- attempt names). The reservations are read only when a hold marker
  -- says one may have lapsed (or a rule keeps a key of its own).
  if hk > 0 then
    if op == 'r' and redis.call('HEXISTS', key(hk), ARGV[ab + 13]) == 1 then
      return redis.error_reply('freqcap: hold id already in use')
    end
    local need = modules
    for _, m in pairs(x.vals) do
      local mk = m[MARK]
      if mk and mk[3] <= nowms then need = true end
    end
    for _, lg in pairs(x.logs) do
      if lg.mark and lg.mark <= nowms then need = true end
    end
    if need then
      lapse(x, key(hk), nk, now)
      e = read()
      if e then return e end
    end
  end

  local c = 1
  if op ~= 'i' then c = tonumber(ARGV[ab + 2]) end
  local consume = op == 't' or op == 'r'

  -- Phase 1: evaluate every rule, writing nothing.
  local res = {0, now}
  local allowed = true
  for r = 1, n do
    local ru = rules[r]
    local code = ru.code
    local flags, used, reset, retry
    if code == 's' then
      flags, used, reset, retry = slidingEval(x, ru, c)
    elseif code == 'f' or code == 'c' then
      flags, used, reset, retry = fixedEval(x, ru, c)
    elseif code == 'g' then
      flags, used, reset, retry = gcraEval(x, ru, c)
    elseif code == 'l' then
      flags, used, reset, retry = logEval(x, ru, c)
    elseif code == 't' or code == 'h' then
      flags, used, reset, retry = modslidingEval(x, ru, c)
    elseif code == 'x' then
      flags, used, reset, retry = cellEval(x, ru, c)
    else
      return redis.error_reply('freqcap: unknown algorithm code ' .. tostring(code))
    end
    if not flags then return used end -- an error reply
    if flags ~= 1 then allowed = false end
    local o = 3 + (r - 1) * 4
    res[o], res[o + 1], res[o + 2], res[o + 3] = flags, used, reset, retry
  end

  -- Phase 2: consume from every rule, only if all admit.
  if allowed and consume and op == 'r' then x.plan = {fmt(now + tonumber(ARGV[ab + 14]))} end

  -- redis-cell rules consume first: CL.THROTTLE decides again, in
  -- nanoseconds against its own clock, and may deny where its peek (whose
  -- remaining is truncated to whole µs) admitted. Then the cell rules
  -- already consumed get their exact previous TAT back (an integer string,
  -- the only value CL.THROTTLE can read) and the request is denied with
  -- nothing else written.
  if allowed and consume and modules then
    local saved, out = {}, {}
    for r = 1, n do
      local ru = rules[r]
      if ru.code == 'x' then
        local k, xs, L = key(ru.ki), ru.st, ru.L
        local v = xs[4]
        saved[#saved + 1] = {k, v, redis.call('PTTL', k)}
        local cr = redis.call('CL.THROTTLE', k, L - 1, xs[1], xs[2], c)
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
          res[o], res[o + 1], res[o + 3] = 0, L - rem, math.max(1, ttl + c * xs[3] - xs[3] * L)
          res[o + 2] = ttl
          allowed, out = false, nil
          break
        end
        local nv = redis.call('GET', k)
        out[#out + 1] = {o, L - rem, nsup(nv) - now}
        if x.plan then x.plan[#x.plan + 1] = 'x ' .. k .. ' ' .. fmt(c * xs[3] * 1000) end
      end
    end
    if out then
      for _, q in ipairs(out) do res[q[1] + 1], res[q[1] + 2] = q[2], q[3] end
    end
  end

  if allowed and consume then
    local ours = {} -- key index -> the entries this attempt writes there
    for r = 1, n do
      local ru = rules[r]
      local code = ru.code
      local ent, used, reset
      if code == 's' then
        ent, used, reset = slidingCommit(x, ru, c)
      elseif code == 'f' or code == 'c' then
        ent, used, reset = fixedCommit(x, ru, c)
      elseif code == 'g' then
        ent, used, reset = gcraCommit(x, ru, c)
      elseif code == 'l' then
        ent, used, reset = logCommit(x, ru, c)
      elseif code == 't' or code == 'h' then
        ent, used, reset = modslidingCommit(x, ru, c)
      end
      if code ~= 'x' then
        local o = 3 + (r - 1) * 4
        res[o + 1], res[o + 2] = used, reset
      end
      if ent then
        local l = ours[ru.ki]
        if not l then
          l = {}
          ours[ru.ki] = l
        end
        l[#l + 1] = ent
      end
    end
    -- A new hold marks every packed value and log it has units in.
    local lapseAt
    if x.plan then lapseAt = math.ceil(tonumber(x.plan[1]) / 1000) end
    for k, list in pairs(ours) do
      local m = x.vals[k]
      if lapseAt then
        local mk, at = m[MARK], lapseAt
        if mk and mk[3] > nowms and mk[3] < at then at = mk[3] end
        list[#list + 1] = {MARK, at, ''}
      end
      local v, top = packv(x.raws[k], m, list, nowms)
      redis.call('SET', key(k), v, 'PXAT', fmt(top))
    end
    if x.plan then
      for k, lg in pairs(x.logs) do
        local at = lapseAt
        if lg.mark and lg.mark > nowms and lg.mark < at then at = lg.mark end
        logMark(key(k), lg, at)
      end
      local hkey = key(hk)
      redis.call('HSET', hkey, ARGV[ab + 13], table.concat(x.plan, '\n'))
      local ttl = tonumber(ARGV[ab + 15])
      if redis.call('PTTL', hkey) < ttl then redis.call('PEXPIRE', hkey, ttl) end
    end
  end
  res[1] = allowed and 1 or 0

  -- The denial trail: one entry per denying rule, same atomic step.
  if not allowed and consume and tk > 0 and tonumber(ARGV[ab + 8]) > 0 then
    local tkey = key(tk)
    local at = fmt(now)
    local tv = ARGV[ab + 11]
    if tv ~= '' then tv = '|' .. tv end
    local ent = {}
    for r = n, 1, -1 do
      local o = 3 + (r - 1) * 4
      local fl = res[o]
      if fl ~= 1 then
        local ru = rules[r]
        ent[#ent + 1] = string.format('%s|%s|%s|%d|%d|%d|%d|%d', at, ARGV[ab + 10], ru.name,
          res[o + 1], ru.L, c, res[o + 3], fl / 2) .. tv
      end
    end
    redis.call('LPUSH', tkey, unpack(ent))
    redis.call('LTRIM', tkey, 0, tonumber(ARGV[ab + 8]) - 1)
    redis.call('PEXPIRE', tkey, ARGV[ab + 9])
  end

  -- Store the decision for retries of the same attempt, in the same step.
  if ik > 0 and consume then
    local parts = {}
    for k = 1, #res do parts[k] = fmt(res[k]) end
    local hid = ''
    if op == 'r' and allowed then hid = ARGV[ab + 13] end
    redis.call('SET', key(ik), hid .. '|' .. table.concat(parts, ','), 'PX', ARGV[ab + 12])
  end

  if op == 'i' and tk > 0 then
    local tr = redis.call('LRANGE', key(tk), 0, tonumber(ARGV[ab + 8]) - 1)
    for k = 1, #tr do res[#res + 1] = tr[k] end
  end
  return res
end

local m = tonumber(ARGV[1])
if m == 1 then return decide(0, 1) end
local out, kb, ab = {}, 0, 1
for a = 1, m do
  out[a] = decide(kb, ab)
  kb = kb + tonumber(ARGV[ab + 4])
  ab = ab + HA + tonumber(ARGV[ab + 3]) * RA
end
return out
