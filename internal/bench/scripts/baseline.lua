-- baseline.lua: the trivial fixed-window step `freqcap bench -baseline`
-- compares decisions against (not used by the backend).
-- KEYS[1]: a counter key
-- ARGV[1]: TTL in ms
-- Reply: the counter after INCRBY (integer)
local v = redis.call('INCRBY', KEYS[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return v
