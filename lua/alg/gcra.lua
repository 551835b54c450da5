-- gcra.lua: GCRA in a packed entry ('g': limit = burst+1, p1 = emission
-- interval T µs, p2 = tolerance T*limit µs; integers:
-- driver.Rule.GCRAParams). Payload '<I7': the TAT, µs. The entry's expiry
-- is the TAT in ms, rounded up.
--
-- Computed in exact integers relative to now, in µs: T and tol are
-- integers, so are ttl = math.max(TAT-now, 0), ttl + c*T and retry; doubles
-- hold integers exactly below 2^53 (the backend bounds tol), and only a
-- division needs care: Remaining = math.floor(left/T) clamped to [0, L], left
-- = tol - ttl, where the double quotient is corrected by one where
-- rounding carried it across an integer. Floors, ceilings and clamps are
-- written inline (x - x % 1 is math.floor(x)): a call of math.* costs the
-- server several times the arithmetic.

--@eval
local T, tol = tonumber(ARGV[b + R_P1]), tonumber(ARGV[b + R_P2])
local ttl = 0
if p then
  ttl = struct.unpack('<I7', v, pq) - now
  if ttl < 0 then ttl = 0 end
end
local new = ttl + c * T
if c > L then
  flags = RULE_TOOHIGH
elseif new > tol then
  flags, retry = RULE_DENIED, new - tol
end
-- What commit stores: a counted exempt takes c whatever the limit, the
-- TAT at most MAXDEBT µs ahead of now (driver.MaxDebt, alg.GCRAExempt;
-- never less far than it is). Exact: below MAXDEBT, new is an exact sum;
-- above, the double is too, and the cap replaces it.
if new > MAXDEBT then
  if ttl > MAXDEBT then new = ttl else new = MAXDEBT end
end
local left = tol - ttl
local q = left / T
q = q - q % 1
if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
if q < 0 then q = 0 elseif q > L then q = L end
used, reset = L - q, ttl
--@save new, ttl, T, tol

--@commit
--@load new, ttl, T, tol
local tat = now + new
local left = tol - new
local q = left / T
q = q - q % 1
if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
if q < 0 then q = 0 elseif q > L then q = L end
exp = tat / 1000
if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
used, reset = L - q, new
--@entry ENTINT, tag, 7, exp, tat
if plan then plan[#plan + 1] = 'G ' .. key .. ' ' .. tag .. ' ' .. sf('%d', new - ttl) .. ' ' .. sf('%d', tat) end

--@import
-- The one-key-per-rule layout's TAT (µs, an integer string).
local nsup, tatok = mods()
local tv = redis.pcall('GET', okey)
if type(tv) == 'string' and tatok(tv) and #tv <= 16 then
  local tat = tonumber(tv)
  if tat > now then parts[#parts + 1] = struct.pack('<c4I3I6I7', tag, 7, math.ceil(tat / 1000), tat) end
end

--@refund
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
