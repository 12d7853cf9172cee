-- Count-down latch: Redisson's delete. Returns 1 when the key was deleted
-- (and '1' published), else 0. Data that is not a latch is refused, not
-- deleted.
local count, bad = latch_count()
if count == nil then
  return bad
end
if not count then
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '1')
return 1
