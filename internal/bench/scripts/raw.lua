-- raw.lua: raw(R), the floor of "one round trip per decision" that
-- `freqcap bench -raw` compares a policy of R rules against (not used by
-- the backend; it decides nothing): one counter per rule, INCRBY on each,
-- PEXPIRE on a counter's first hit.
-- KEYS[1..R]: the counters, one per rule
-- ARGV[1]: TTL in ms
-- Reply: 1
for i = 1, #KEYS do
  if redis.call('INCRBY', KEYS[i], 1) == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
  end
end
return 1
