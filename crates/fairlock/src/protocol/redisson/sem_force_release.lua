-- Expirable semaphore: give back every taken permit, whoever took it (a
-- force-release; Redisson has none, this is its tryRelease(ids) applied to
-- every id in the set).
-- KEYS as sem_acquire.lua; ARGV[1] now (ms, this client's clock)
-- Returns the number of permits given back: those taken and within their
-- lease. As every call does, the permits whose lease ended are reclaimed
-- first (and published as a reclaim is); they are not counted. Then every
-- permit left is removed, added to the count, and their number published,
-- as Redisson's release of several ids publishes it: Java waiters wake.
-- Their holders are not told (a permit id names no owner): a fairlock
-- holder finds its permits gone at its next renewal.
local _, bad = open_expirable('', ARGV[1], nil)
if bad then
  return bad
end
local released = 0
local taken = redis.call('zrange', KEYS[2], 0, -1)
if #taken > 0 then
  released = zrem_all(KEYS[2], taken)
  redis.call('incrby', KEYS[1], released)
  redis.call('publish', KEYS[3], released)
end
return released
