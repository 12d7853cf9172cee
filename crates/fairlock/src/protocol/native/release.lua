-- Native lock: release one hold; the last one hands the lock to the next
-- live waiter directly (it proceeds on the message, with no further call).
-- KEYS[1..5] see the prelude, KEYS[6] result cache of this request
-- ARGV[1] owner, ARGV[2] waiter ttl ms, ARGV[3] channel prefix, ARGV[4] cache ttl ms
-- Returns 1 released, 0 still held, -1 held by another owner, -2 not held.
-- Cost: O(log N).
local err = check_types() or wrong_type(KEYS[6], 'string')
if err then
  return err
end
local cached = redis.call('get', KEYS[6])
if cached then
  return tonumber(cached)
end
local owner = ARGV[1]
local holder = redis.call('hget', KEYS[1], 'owner')
if not holder then
  return -2
end
if holder ~= owner then
  return -1
end
if redis.call('hincrby', KEYS[1], 'count', -1) > 0 then
  redis.call('set', KEYS[6], 0, 'px', ARGV[4])
  return 0
end
local now, now_us = server_now()
release_fully(ARGV[3], tonumber(ARGV[2]), now, now_us)
redis.call('set', KEYS[6], 1, 'px', ARGV[4])
return 1
