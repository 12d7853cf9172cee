-- Count-down latch: delete it, which opens it: its round is published as
-- when the count reaches 0. Returns 1 when a latch was deleted, else 0.
local count, expiry, round = read_latch()
if count == nil then
  return expiry -- read_latch failed: its second value is the error reply
end
if not count then
  redis.call('del', KEYS[2])
  return 0
end
redis.call('del', KEYS[1], KEYS[2])
redis.call('publish', KEYS[3], round)
return 1
