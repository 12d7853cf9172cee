-- Non-fair lock: try to acquire.
-- KEYS[1] lock hash
-- ARGV[1] lease ms, ARGV[2] owner,
-- ARGV[3] the owner's hold count before this acquisition (finding one more means an
--   earlier attempt whose reply was lost succeeded)
-- KEYS[2], ARGV[4] (optional; fairlock's, not Redisson's): the lock's client
--   labels and this client's label, written when the owner takes or re-enters
-- Returns {1, 1} acquired, {2, count} re-entered, {3, ttl} held by another owner.
-- The lock's first touch (HGETALL) is a read: another type fails before any write.
local owner = ARGV[2]
local exists, held, bad = hold_of(KEYS[1], owner)
if bad then
  return bad
end
if held == tonumber(ARGV[3]) + 1 then
  write_label(KEYS[2], owner, ARGV[4], ARGV[1])
  if held == 1 then
    return {1, 1}
  end
  return {2, held}
end
if not exists or held then
  local count = redis.call('hincrby', KEYS[1], owner, 1)
  write_label(KEYS[2], owner, ARGV[4], ARGV[1])
  if count == 1 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, 1}
  end
  -- A re-entry: GT never cuts the owner's other holds.
  redis.call('pexpire', KEYS[1], ARGV[1], 'gt')
  return {2, count}
end
return {3, math.max(0, redis.call('pttl', KEYS[1]))}
