-- Count-down latch: Redisson's getCount, read only, and the key's ttl.
-- Returns {count, ttl ms}: {0, -2} when there is no latch.
local count, bad = latch_count()
if count == nil then
  return bad
end
if not count then
  return {0, -2}
end
return {count, redis.call('pttl', KEYS[1])}
