-- Count-down latch: Redisson's countDown. Returns {1, the count after
-- it}, or {0, 0} when there was no latch (nothing written). Reaching 0 or below
-- deletes the key; reaching exactly 0 publishes '0'.
local count, bad = latch_count()
if count == nil then
  return bad
end
if not count then
  return {0, 0}
end
count = redis.call('decr', KEYS[1])
if count <= 0 then
  redis.call('del', KEYS[1])
end
if count == 0 then
  redis.call('publish', KEYS[2], '0')
end
return {1, count}
