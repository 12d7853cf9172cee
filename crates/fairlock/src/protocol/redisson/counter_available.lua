-- Plain semaphore: the available count, initialising an absent semaphore.
-- KEYS as counter_acquire.lua; ARGV[1] the count to initialise it with
-- Returns the available count.
local available, bad = available_of(KEYS[1])
if bad then
  return bad
end
if not available then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call('publish', KEYS[2], ARGV[1])
  available = tonumber(ARGV[1])
end
return available
