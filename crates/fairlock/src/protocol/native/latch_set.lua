-- Count-down latch: set the count when the latch is open (absent).
-- ARGV[1] the count (1 or more), ARGV[2] the expiry in ms, ARGV[3] the
-- round id (hex). Returns {1, count} set (now, or by an earlier sending
-- of this call), {0, count} left alone: it is counting down already.
local count, expiry, round = read_latch()
if count == nil then
  return expiry -- read_latch failed: its second value is the error reply
end
if count then
  -- Its own round: this call, sent again (a Cluster client library sends
  -- a call again after a dropped connection), set it.
  return {round == ARGV[3] and 1 or 0, count}
end
-- Parties of an earlier round whose keys outlived its hash by a tick.
redis.call('del', KEYS[2])
redis.call('hset', KEYS[1], 'count', ARGV[1], 'expiry', ARGV[2], 'round', ARGV[3])
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, tonumber(ARGV[1])}
