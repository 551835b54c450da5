-- fixed.lua: fixed windows in a packed entry, epoch-aligned ('f': p1 =
-- window µs) or calendar ('c': p1 = consecutive boundaries, Unix ms,
-- comma-separated). Payload '<I7': the count. The entry's expiry is the
-- window's end in ms: an entry of another window counts nothing, but for
-- a calendar rule's entry not ended yet, which is the window it counts in
-- until it ends (alg.FixedEnd: the attempt's zone, driver.Request.Zone,
-- may have changed since; its window around now is the next one).
-- Sections (lua.go pastes each where take.lua or holds.lua names it; the
-- frame's variables are listed in take.lua):

--@eval
local e
if code == C_FIXED then
  local W = tonumber(ARGV[b + R_P1])
  e = now - now % W + W
elseif p and pe * 1000 > now then
  e = pe * 1000 -- the stored window, until it ends
else
  local prev
  for bv in string.gmatch(ARGV[b + R_P1], '%d+') do
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
  flags = RULE_TOOHIGH
elseif used + c > L then
  flags, retry = RULE_DENIED, e - now
end
--@save em, e

--@commit
--@load em, e
-- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
-- alg.Exempt): c is what this rule takes, none once it is there.
local c = c
if used + c > MAXUSED then
  c = MAXUSED - used
  if c < 0 then c = 0 end
end
used, reset, exp = used + c, e - now, em
--@entry ENTINT, tag, 7, exp, used
if plan then plan[#plan + 1] = 'F ' .. key .. ' ' .. tag .. ' ' .. sf('%d', exp) .. ' ' .. sf('%d', c) end

--@import
-- The one-key-per-rule layout's counter (a string whose PEXPIRETIME is its
-- window's end): an entry of that window.
local cnt = redis.pcall('GET', okey)
if type(cnt) == 'string' and tonumber(cnt) then
  local pet = redis.call('PEXPIRETIME', okey)
  if pet > 0 then parts[#parts + 1] = struct.pack('<c4I3I6I7', tag, 7, pet, tonumber(cnt)) end
end

--@refund
-- "F <key> <tag> <window end ms> <cost>": c units back while the entry
-- is of that window.
local em, c = tonumber(f[4]), tonumber(f[5])
patch(key, f[3], function(v, len, exp, q)
  if exp ~= em then return exp, string.sub(v, q, q + len - 1) end
  local used = struct.unpack('<I7', v, q)
  return exp, struct.pack('<I7', used - math.min(used, c))
end)
