-- Expirable semaphore: make the total n (Redisson's setPermits).
-- KEYS as sem_acquire.lua; ARGV[1] n
-- Returns the count of available permits afterwards.
-- Absent: the count is n. Else the count moves by n minus the total
-- (available + taken, expired ones included, as Redisson counts), and may
-- go below 0 while more than n are taken; n is published on a change.
local n = tonumber(ARGV[1])
local available, bad = available_of(KEYS[1])
if bad then
  return bad
end
local taken = redis.call('zcard', KEYS[2])
if not available then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call('publish', KEYS[3], ARGV[1])
  return n
end
local total = available + taken
if total == n then
  return available
end
available = redis.call('incrby', KEYS[1], n - total)
redis.call('publish', KEYS[3], ARGV[1])
return available
