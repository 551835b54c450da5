-- people.lua: identity links and persons' stored zones (driver.Linker),
-- not on the decision path. Two kinds of key, both hashes:
--   an identity's (idKey): p = the person it is linked to, l = the link's
--     record;
--   a person's (personKey): z = the stored zone, "l" .. id = the record of
--     each identity listed, n = the number of the latest audit event,
--     "e" .. n = that event (the MAX_EVENTS newest are kept).
-- A record is "<created µs> <rest>", an event "<at µs> <rest>": rest is
-- backends/redis/people.go's format, given in ARGV; this script adds the
-- server's clock (TIME) in front and never reads rest.
--
-- ARGV[1] op, then by op:
--   list    KEYS[1] personKey; ARGV[2] id, ARGV[3] the record's rest,
--           ARGV[4] the event's rest, ARGV[5] the most links, ARGV[6] the
--           most events. Lists id (a listed id keeps its created) and
--           records the event. Reply {created µs, event number, 1 if id
--           was not listed before else 0}, or -1 when the person has the
--           most links already (nothing written).
--   set     KEYS[1] idKey; ARGV[2] the person, ARGV[3] the whole record.
--           Reply 1, or 0 when idKey links another person (nothing
--           written).
--   unlist  KEYS[1] personKey; ARGV[2] id, ARGV[3] the record written by
--           list, ARGV[4] the event number list returned, ARGV[5] 1 to
--           drop the record too. Undoes a list whose set failed: drops its
--           event, and the record if it is still the one written. Reply 1.
--   link    KEYS[1] idKey, KEYS[2] personKey; ARGV as list, then ARGV[7]
--           the person: check, list and set in one script (a standalone
--           or Sentinel server: both keys on one server). Reply as list,
--           or 0 when idKey links another person (nothing written).
--   clear   KEYS[1] idKey; ARGV[2] a record. Deletes idKey if its record
--           is that one. Reply 1 deleted, else 0.
--   delist  KEYS[1] personKey; ARGV[2] id, ARGV[3] the event's rest,
--           ARGV[4] the most events, ARGV[5] the record clear deleted.
--           Drops id's record if it is still that one, and records the
--           event. Reply 1.
--   unlink  KEYS[1] idKey, KEYS[2] personKey; ARGV[2..4] as delist: clear
--           and delist in one script, when idKey's record is the one listed
--           for id under personKey. Reply 1, or 0 when it is not (nothing
--           written).
--   zone    KEYS[1] personKey; ARGV[2] the zone ("" clears it), ARGV[3]
--           the event's rest, ARGV[4] the most events. Reply 1.

local t = redis.call('TIME')
local now = string.format('%d', t[1] * 1000000 + t[2])
local op = ARGV[1]

-- event records an event of key and keeps its most newest; it returns the
-- event's number.
local function event(key, rest, most)
  local n = redis.call('HINCRBY', key, 'n', 1)
  redis.call('HSET', key, 'e' .. n, now .. ' ' .. rest)
  local old = n - tonumber(most)
  if old >= 1 then redis.call('HDEL', key, 'e' .. old) end
  return n
end

-- links counts the identities listed under key.
local function links(key)
  local c = 0
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.byte(f, 1) == 108 then c = c + 1 end -- 'l'
  end
  return c
end

local function list(key, id, rest, ev, maxLinks, maxEvents)
  local old = redis.call('HGET', key, 'l' .. id)
  local created, fresh = now, 1
  if old then
    created, fresh = string.match(old, '^(%d+) '), 0
  elseif links(key) >= tonumber(maxLinks) then
    return -1
  end
  redis.call('HSET', key, 'l' .. id, created .. ' ' .. rest)
  return {tonumber(created), event(key, ev, maxEvents), fresh}
end

local function linksOther(idKey, person)
  local p = redis.call('HGET', idKey, 'p')
  return p and p ~= person
end

if op == 'list' then
  return list(KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
elseif op == 'set' then
  if linksOther(KEYS[1], ARGV[2]) then return 0 end
  redis.call('HSET', KEYS[1], 'p', ARGV[2], 'l', ARGV[3])
  return 1
elseif op == 'unlist' then
  local f = 'l' .. ARGV[2]
  if ARGV[5] == '1' and redis.call('HGET', KEYS[1], f) == ARGV[3] then
    redis.call('HDEL', KEYS[1], f)
  end
  redis.call('HDEL', KEYS[1], 'e' .. ARGV[4])
  return 1
elseif op == 'link' then
  if linksOther(KEYS[1], ARGV[7]) then return 0 end
  local r = list(KEYS[2], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
  if r == -1 then return r end
  redis.call('HSET', KEYS[1], 'p', ARGV[7], 'l', string.format('%d', r[1]) .. ' ' .. ARGV[3])
  return r
elseif op == 'clear' then
  if redis.call('HGET', KEYS[1], 'l') ~= ARGV[2] then return 0 end
  redis.call('DEL', KEYS[1])
  return 1
elseif op == 'delist' then
  local f = 'l' .. ARGV[2]
  if redis.call('HGET', KEYS[1], f) == ARGV[5] then redis.call('HDEL', KEYS[1], f) end
  event(KEYS[1], ARGV[3], ARGV[4])
  return 1
elseif op == 'unlink' then
  local f = 'l' .. ARGV[2]
  local r = redis.call('HGET', KEYS[1], 'l')
  if not r or r ~= redis.call('HGET', KEYS[2], f) then return 0 end
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[2], f)
  event(KEYS[2], ARGV[3], ARGV[4])
  return 1
elseif op == 'zone' then
  if ARGV[2] == '' then
    redis.call('HDEL', KEYS[1], 'z')
  else
    redis.call('HSET', KEYS[1], 'z', ARGV[2])
  end
  event(KEYS[1], ARGV[3], ARGV[4])
  return 1
end
return redis.error_reply('freqcap: people: unknown op')
