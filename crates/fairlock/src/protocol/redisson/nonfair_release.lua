-- Non-fair lock: release one hold.
-- KEYS[1] lock hash, KEYS[2] wake-up channel, KEYS[3] unlock result cache of this request
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] cache ttl ms
-- Returns 1 released, 0 still held, -1 held by another owner, -2 the lock did not exist.
-- Both keys' first touches (GET, HGETALL) are reads: another type fails
-- before anything is written.
local cached = redis.call('get', KEYS[3])
if cached then
  return tonumber(cached)
end
local exists, held, bad = hold_of(KEYS[1], ARGV[1])
if bad then
  return bad
end
if not exists then
  return -2
end
if not held then
  return -1
end
if held > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  -- GT: releasing one hold never cuts the lease of the holds left.
  redis.call('pexpire', KEYS[1], ARGV[2], 'gt')
  redis.call('set', KEYS[3], 0, 'px', ARGV[3])
  return 0
end
-- The last hold: deleting at once leaves the state Redisson's count-down
-- to 0 and delete leaves.
-- The cache first: under maxmemory (OOM) SET is refused before any effect,
-- while DEL and PUBLISH would not be.
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
