-- log.lua: packed sliding logs ('l': p1 = window µs, p2 under
-- Options.Upgrade what the log is built from once when it is not there:
-- the index of the set's sorted-set log, or a sliding window's cells,
-- CARRYREC; 0 = none): the
-- SlidingLog rules, and the SlidingWindow rules evaluated as exact logs
-- (driver.Rule.ExactLog), whose limit is at most driver.LogLine. A rule's
-- log is its entry in the dimension set's packed value, as any packed
-- rule's, so it answers exactly as the memory backend's log of that rule
-- whatever the request's other rules (a subset of a set's rules, shadow
-- rules, a rule replaced). Payload: '<I7' base, then one record '<I7I7'
-- per instant holding admitted units, oldest first: the server µs and the
-- cumulative units up to and including it (base: those of the records
-- trimmed before the first). The rule of window W counts the records with
-- t > now-W, found by binary search: used = cum(last) - cum(the record
-- before the first counted, or base); its retry-after is when the record
-- where the cumulative count reaches what is needed leaves (another
-- binary search). A decision appends one record (or adds to the newest
-- at the same µs), trimming the records that left the window: at most
-- Limit records stay (each holds a unit or more). The entry expires when
-- the newest record leaves the window. A clock gone back inserts in order
-- (rare: a rebuild).
--
-- Record z (1-based) starts at pq + 14*z - 7, its cumulative count at
-- pq + 14*z.

--@eval
-- The first record in (now-W, ...] is j (k+1: none); before, the
-- cumulative count before it (base when j = 1); nl and top, the newest
-- record's µs and cumulative count (0 and before: none in the window).
local W = tonumber(ARGV[b + R_P1])
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
  flags = RULE_TOOHIGH
elseif used + c > L then
  flags = RULE_DENIED
end
--@save j, nl, before, top

--@commit
-- Trimmed to the window, c units at now added: the entry is base (before),
-- the records kept but the last (mid, as stored), then the last record
-- (lt µs, lc units), packed in one struct.pack (eval read every number it
-- needs: commit reads none).
--@load j, nl, before, top
-- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
-- alg.Exempt): c is what this rule takes, none once it is there.
local c = c
if used + c > MAXUSED then
  c = MAXUSED - used
  if c < 0 then c = 0 end
end
local W = tonumber(ARGV[b + R_P1])
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
if base >= MAXUSED / 2 then
  local out = {}
  for z = 1, #mid / 14 do
    local t, u = struct.unpack('<I7I7', mid, 14 * z - 13)
    out[z] = struct.pack('<I7I7', t, u - base)
  end
  mid, lc, base = table.concat(out), lc - base, 0
end
-- The entry, struct LOGENT: take.lua packs it here (ent); a fast script
-- packs its set's whole value in one struct.pack from these values.
--@entry LOGENT, tag, 21 + #mid, exp, base, mid, lt, lc
used, reset = used + c, hi + W - now
if plan then plan[#plan + 1] = 'L ' .. key .. ' ' .. tag .. ' ' .. sf('%d', now) .. ' ' .. sf('%d', c) end

--@import
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
  parts[#parts + 1] = struct.pack(HDR, tag, #body, exp) .. body
end

--@refund
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
