-- Native lock: release one hold; the last one hands the lock to the next
-- live waiter directly (it proceeds on the message, with no further call).
-- KEYS[1..5] see the prelude, KEYS[6] result cache of this request
-- ARGV[1] owner, ARGV[2] waiter ttl ms (for a waiter without a record),
-- ARGV[3] channel prefix, ARGV[4] cache ttl ms, ARGV[5] the token of the
-- hold being released ('' for any hold of the owner), ARGV[6] the secret
-- of the acquisition being undone ('' for any)
-- Returns 1 released, 0 still held, -1 held by another owner, -2 not held
-- (nor by this acquisition: the same owner may hold it under a newer token).
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
local holder = redis.call('hmget', KEYS[1], 'owner', 'token', 'nonce')
if not holder[1] then
  return -2
end
if holder[1] ~= owner then
  return -1
end
if (ARGV[5] ~= '' and holder[2] ~= ARGV[5]) or (ARGV[6] ~= '' and holder[3] ~= ARGV[6]) then
  -- A later acquisition of the same owner: not ours to release.
  return -2
end
if redis.call('hincrby', KEYS[1], 'count', -1) > 0 then
  redis.call('set', KEYS[6], 0, 'px', ARGV[4])
  return 0
end
local now, now_us = server_now()
release_fully(ARGV[3], tonumber(ARGV[2]), now, now_us)
redis.call('set', KEYS[6], 1, 'px', ARGV[4])
return 1
