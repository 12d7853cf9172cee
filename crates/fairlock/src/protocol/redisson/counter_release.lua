-- Plain semaphore: give back n permits (Redisson's release(n)).
-- KEYS as counter_acquire.lua; ARGV[1] n
-- Returns the new count, which is published.
local _, bad = available_of(KEYS[1])
if bad then
  return bad
end
local available = redis.call('incrby', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], available)
return available
