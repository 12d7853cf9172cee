-- Count-down latch: its state, read only.
-- Returns {count, round, parties, ttl ms}: {0, '', 0, -2} when open.
local count, expiry, round = read_latch()
if count == nil then
  return expiry -- read_latch failed: its second value is the error reply
end
if not count then
  return {0, '', 0, -2}
end
return {count, round, redis.call('scard', KEYS[2]), redis.call('pttl', KEYS[1])}
