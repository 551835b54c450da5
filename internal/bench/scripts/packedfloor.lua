-- packedfloor.lua: the floor of the packed layout (docs/DESIGN.md, "Redis
-- layout"), which `freqcap bench -raw -floor` runs beside raw(R): the
-- cheapest script that keeps R fixed-window counters as entries of ONE
-- packed value per subject (the same entry format as take.lua) and
-- decides all-or-nothing: TIME, GET, decode R entries, admit iff every
-- count is under a limit, SET … PXAT with R entries, reply {allowed, now}.
-- No reservations, trail, idempotency, per-rule details (used, reset,
-- retry), tags, calendars or other algorithms: what take.lua does on top
-- of this is its own cost. It is not used by the backend.
--
-- KEYS[1]: the subject's packed key
-- ARGV[1]: the window, ms; ARGV[2]: R (1 to 9)
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local R = tonumber(ARGV[2])
local W = tonumber(ARGV[1]) * 1000
local em = math.ceil((now - now % W + W) / 1000)
local v = redis.call('GET', KEYS[1])
local counts = {}
for r = 1, R do counts[r] = 0 end
if v then
  local p = 2
  for r = 1, R do
    local _, len, exp, q = struct.unpack('<c4I3I6', v, p)
    if exp == em then counts[r] = struct.unpack('<I7', v, q) end
    p = q + len
  end
end
for r = 1, R do
  if counts[r] >= 1000000 then return {0, now} end
end
local parts = {'\1'}
for r = 1, R do parts[r + 1] = struct.pack('<c4I3I6I7', 'r' .. r .. '__', 7, em, counts[r] + 1) end
redis.call('SET', KEYS[1], table.concat(parts), 'PXAT', string.format('%d', em))
return {1, now}
