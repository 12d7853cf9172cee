-- Non-fair lock: release one hold.
-- KEYS[1] lock hash, KEYS[2] wake-up channel, KEYS[3] unlock result cache of this request
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] cache ttl ms
-- Returns 1 released, 0 still held, -1 held by another owner, -2 the lock did not exist.
local err = wrong_type(KEYS[1], 'hash') or wrong_type(KEYS[3], 'string')
if err then
  return err
end
local cached = redis.call('get', KEYS[3])
if cached then
  return tonumber(cached)
end
if redis.call('exists', KEYS[1]) == 0 then
  return -2
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[3])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
return 1
