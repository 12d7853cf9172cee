-- Native lock: whether it is held and for how long (read-only).
-- KEYS[1] the lock (see lock_prelude.lua)
-- Returns the lock's PTTL when it is held, -2 when it is free (absent, or
-- the free marker of a release, which has a TTL of its own).
local lock, bad = lock_of(redis.pcall('get', KEYS[1]))
if bad then
  return bad
end
if not lock.owner then
  return -2
end
return redis.call('pttl', KEYS[1])
