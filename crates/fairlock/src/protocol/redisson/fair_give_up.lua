-- Fair lock: a waiter leaves the queue (timeout, cancellation, error).
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines, KEYS[4] channel prefix
-- ARGV[1] owner, ARGV[2] waiter slot ms
-- Returns 1 when the owner was queued, else 0.
local err = wrong_type(KEYS[1], 'hash') or wrong_type(KEYS[2], 'list') or wrong_type(KEYS[3], 'zset')
if err then
  return err
end
local owner, slot = ARGV[1], tonumber(ARGV[2])
local position = redis.call('lpos', KEYS[2], owner)
if not position then
  redis.call('zrem', KEYS[3], owner)
  return 0
end
-- Everyone behind the leaver moves up one slot.
local behind = redis.call('lrange', KEYS[2], position + 1, -1)
for _, waiter in ipairs(behind) do
  redis.call('zincrby', KEYS[3], -slot, waiter)
end
redis.call('zrem', KEYS[3], owner)
redis.call('lrem', KEYS[2], 0, owner)
-- fairlock's one addition: a head that leaves a free lock wakes the next
-- waiter at once instead of letting it sleep out its TTL. Redisson clients
-- treat the message as an ordinary wake-up.
if position == 0 and redis.call('exists', KEYS[1]) == 0 then
  notify_head(KEYS[2], KEYS[4])
end
return 1
