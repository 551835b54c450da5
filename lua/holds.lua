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
  -- must exist, and the root's key is written (a wide root's hash field,
  -- the hash at the root's key plus WIDESUFFIX, which the caller
  -- declares among its KEYS).
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
      if rm[WIDETAG] then
        v = wide(math.floor(now / 1000)).get(rkey .. WIDESUFFIX, id)
      else
        v = sectv(rv, rm, id)
      end
      if not v then return end
      m = unpackv(v)
      if not m then return end
    end
    local nexp, payload
    if m[tag] then
      local _, len, exp, q = struct.unpack(HDR, v, m[tag])
      nexp, payload = fn(v, len, exp, q)
    else
      nexp, payload = fn()
      if not nexp then return end -- nothing there, nothing to add
    end
    m[tag] = nil
    local ours = {}
    if nexp then ours[1] = struct.pack(HDR, tag, #payload, nexp) .. payload end
    local nv, top = packv(v, m, ours, nexp or 0, 0)
    if ckey and rm[WIDETAG] then
      -- A wide root's section is its hash's field (prelude.lua's wide).
      wide(math.floor(now / 1000)).root(rkey, rkey .. WIDESUFFIX, rv, rm, {}, 0, {[id] = section(id, nv, top)}, nil, {[id] = string.sub(ckey, #rkey + 1)})
      return
    end
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
      --@fixed.refund
    elseif a == 'S' then
      --@sliding.refund
    elseif a == 'G' then
      --@gcra.refund
    elseif a == 'L' then
      --@log.refund
    elseif a == 'l' then
      --@zlog.refund
    elseif a == 't' or a == 'h' or a == 's' then
      --@modsliding.refund
    elseif a == 'x' then
      --@cell.refund
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
