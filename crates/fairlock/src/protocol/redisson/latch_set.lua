-- Count-down latch: Redisson's trySetCount. ARGV[1] the count.
-- Returns 1 set (and '1' published), 0 when the name exists.
local count, bad = latch_count()
if count == nil then
  return bad
end
if count then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], '1')
return 1
