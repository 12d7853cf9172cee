-- Native lock: a waiter stops waiting (timeout, cancellation, error). If the
-- lock was handed to it meanwhile and it never claimed it, it is passed on.
-- KEYS[1..5] see the prelude
-- ARGV[1] owner, ARGV[2] waiter ttl ms, ARGV[3] channel prefix, ARGV[4] the
-- acquisition's secret (only its own unclaimed grant is passed on, never a
-- later acquisition's of the same owner)
-- Returns 0 not queued, 1 left the queue, 2 passed on a grant it had not taken.
-- Cost: O(log N).
local err = check_types()
if err then
  return err
end
local owner = ARGV[1]
local queued = leave_queue(owner)
local holder = redis.call('hmget', KEYS[1], 'owner', 'claimed', 'nonce')
if holder[1] == owner and holder[2] == '0' and holder[3] == ARGV[4] then
  local now, now_us = server_now()
  release_fully(ARGV[3], tonumber(ARGV[2]), now, now_us)
  return 2
end
return queued
