-- Plain semaphore (Redisson's RSemaphore): take n permits.
-- KEYS[1] the count (the name), KEYS[2] the channel 'redisson_sc:{NAME}'
-- ARGV[1] n, ARGV[2] the count to initialise an absent semaphore with
-- Returns {1} taken, {0, available} busy, {2, total} refused: the semaphore
-- does not exist and n is above the total it would be set up with
-- (nothing written). An existing semaphore records no total (only what is
-- available), so a request there is never refused: it waits, as
-- Redisson's acquire(n) does.
local n = tonumber(ARGV[1])
local available, bad = available_of(KEYS[1])
if bad then
  return bad
end
if not available then
  if n > tonumber(ARGV[2]) then
    return {2, tonumber(ARGV[2])}
  end
  -- Not initialised yet: Redisson's trySetPermits.
  redis.call('set', KEYS[1], ARGV[2])
  redis.call('publish', KEYS[2], ARGV[2])
  available = tonumber(ARGV[2])
end
if available >= n then
  redis.call('decrby', KEYS[1], n)
  return {1}
end
return {0, available}
