-- floor.lua: the cheapest conceivable single-script step of a 4-rule
-- policy, which `freqcap bench -floor` measures to show how close any
-- design could come to the trivial baseline on the machine at hand. It is
-- not used by the backend and is not a limiter: it decides nothing.
--
-- It does only what every design must do on each decision, with no
-- arithmetic at all: read the server clock, then on each state key read
-- the rules' fields, write them back and keep the key's TTL. Eight fields
-- in all (two per rule), spread over the keys given: one key (all four
-- rules' state packed in ONE hash per subject), two (one per set of
-- dimensions: user, user+content) or four (one key per rule, as take.lua
-- stores them). Field names are literals, not ARGV, to keep the floor as
-- low as it goes.
--
-- KEYS[1..n]: the subject's state keys (one hash tag), n = 1, 2 or 4
-- ARGV[1]:    TTL in ms
-- Reply: 1
redis.call('TIME')
local n = #KEYS
if n == 1 then
  local k = KEYS[1]
  redis.call('HMGET', k, 'a1', 'b1', 'a2', 'b2', 'a3', 'b3', 'a4', 'b4')
  redis.call('HSET', k, 'a1', 1, 'b1', 2, 'a2', 3, 'b2', 4, 'a3', 5, 'b3', 6, 'a4', 7, 'b4', 8)
  redis.call('PEXPIRE', k, ARGV[1])
elseif n == 2 then
  for _, k in ipairs(KEYS) do
    redis.call('HMGET', k, 'a1', 'b1', 'a2', 'b2')
    redis.call('HSET', k, 'a1', 1, 'b1', 2, 'a2', 3, 'b2', 4)
    redis.call('PEXPIRE', k, ARGV[1])
  end
elseif n == 4 then
  for _, k in ipairs(KEYS) do
    redis.call('HMGET', k, 'a', 'b')
    redis.call('HSET', k, 'a', 1, 'b', 2)
    redis.call('PEXPIRE', k, ARGV[1])
  end
else
  return redis.error_reply('floor.lua: give 1, 2 or 4 keys')
end
return 1
