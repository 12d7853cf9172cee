-- Read-write lock (Redisson's RReadWriteLock): release one write hold.
-- KEYS[1] lock hash, KEYS[2] channel ('redisson_rwlock:{NAME}'), KEYS[3]
-- unlock result cache of this request
-- ARGV[1] the writer 'CLIENT:THREAD:write', ARGV[2] lease ms, ARGV[3] cache ttl ms
-- Returns 1 the last write hold released, 0 write holds left, -1 the
-- owner holds no write hold while others hold the lock, -2 nobody holds it.
--
-- As Redisson: the last write hold leaves the lock in read mode when the
-- writer also reads (a downgrade; nothing is published, as Redisson
-- publishes nothing), else deletes it and publishes '1' (every waiter of
-- every client retries: several readers may enter).
local writer = ARGV[1]
local done, state = release_start(KEYS[3])
if done then
  return done
end
local held = state.counts[writer]
if state.mode ~= 'write' or not held then
  return -1
end
if held > 1 then
  redis.call('set', KEYS[3], 0, 'px', ARGV[3])
  redis.call('hincrby', KEYS[1], writer, -1)
  -- GT: releasing one hold never cuts the lease of the holds left.
  redis.call('pexpire', KEYS[1], ARGV[2], 'gt')
  return 0
end
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
if state.holders == 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '1')
else
  redis.call('hdel', KEYS[1], writer)
  redis.call('hset', KEYS[1], 'mode', 'read')
end
return 1
