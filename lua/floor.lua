-- floor.lua: the cheapest conceivable single-script step for a 4-rule
-- policy, which `freqcap bench -floor` measures to show how close any
-- design could come to the trivial baseline (not used by the backend, and
-- not a limiter: it decides nothing).
--
-- It does only what every design must do on each decision, with all four
-- rules' state packed in ONE hash per subject and no arithmetic at all:
-- read the server clock, read two fields per rule (e.g. a running total
-- and its bookkeeping), write them back, keep the key's TTL.
--
-- KEYS[1]: the subject's hash
-- ARGV[1]: TTL in ms
-- Reply: 1
redis.call('TIME')
redis.call('HMGET', KEYS[1], 'a1', 'b1', 'a2', 'b2', 'a3', 'b3', 'a4', 'b4')
redis.call('HSET', KEYS[1], 'a1', 1, 'b1', 2, 'a2', 3, 'b2', 4, 'a3', 5, 'b3', 6, 'a4', 7, 'b4', 8)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
