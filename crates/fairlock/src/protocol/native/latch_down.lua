-- Count-down latch: count down once, as party ARGV[1] ('' for none: every
-- call counts). A party counts at most once per round: a retried call
-- finds itself in the parties and counts nothing.
-- Returns {counted (1 or 0), the count after}. An absent latch is open:
-- {0, 0}, nothing written. The count reaching 0 deletes both keys and
-- publishes the round on the channel.
local count, expiry, round = read_latch()
if count == nil then
  return expiry -- read_latch failed: its second value is the error reply
end
if not count then
  return {0, 0}
end
local party = ARGV[1]
if party ~= '' and redis.call('sismember', KEYS[2], party) == 1 then
  return {0, count}
end
count = count - 1
if count == 0 then
  redis.call('del', KEYS[1], KEYS[2])
  redis.call('publish', KEYS[3], round)
  return {1, 0}
end
redis.call('hset', KEYS[1], 'count', count)
redis.call('pexpire', KEYS[1], expiry)
if party ~= '' then
  redis.call('sadd', KEYS[2], party)
end
-- The parties live as long as the count, an anonymous count-down pushing
-- their expiry back too: expired first, a party would count again.
redis.call('pexpire', KEYS[2], expiry)
return {1, count}
