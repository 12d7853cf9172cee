-- Native lock: release whoever holds it and hand it to the next live waiter.
-- KEYS[1..5] see the prelude
-- ARGV[1] waiter ttl ms, ARGV[2] channel prefix
-- Returns 1 when a holder was removed, else 0. Cost: O(log N).
local err = check_types()
if err then
  return err
end
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local now, now_us = server_now()
release_fully(ARGV[2], tonumber(ARGV[1]), now, now_us)
return 1
