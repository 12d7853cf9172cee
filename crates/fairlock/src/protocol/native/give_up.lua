-- Native lock: a waiter stops waiting (timeout, cancellation, error). If the
-- lock was handed to it meanwhile and it never claimed it, it is passed on;
-- a non-fair waiter that leaves a free lock wakes the next one (it may have
-- been the one a release woke).
-- KEYS[1..5] see the prelude
-- ARGV[1] owner, ARGV[2] waiter ttl ms, ARGV[3] channel prefix, ARGV[4] the
-- acquisition's secret (only its own unclaimed grant is passed on, never a
-- later acquisition's of the same owner), ARGV[5] 'fair' or 'nonfair'
-- Returns 0 not queued, 1 left the queue, 2 passed on a grant it had not taken.
-- Cost: O(log N).
-- Meta's counters are checked before any write (a grant may be passed on).
local err = check_types(true) or read_meta()
if err then
  return err
end
local owner, fair = ARGV[1], ARGV[5] ~= 'nonfair'
local queued = leave_queue(owner)
local holder = redis.call('hmget', KEYS[1], 'owner', 'claimed', 'nonce')
if holder[1] == owner and holder[2] == '0' and holder[3] == ARGV[4] then
  release_fully(ARGV[3], tonumber(ARGV[2]), fair, anybody_waits())
  return 2
end
if queued == 1 and not fair and not holder[1] then
  local now, now_us = server_now()
  wake_one(ARGV[3], tonumber(ARGV[2]), now, now_us)
end
return queued
