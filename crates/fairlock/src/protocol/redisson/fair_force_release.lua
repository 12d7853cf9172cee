-- Fair lock: release whoever holds it. The queue stays.
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines, KEYS[4] channel prefix
-- ARGV[1] now (client clock, ms), ARGV[2] revocation channel prefix (fairlock's)
-- Returns 1 when a lock was deleted, else 0.
local err = wrong_type(KEYS[1], 'hash') or wrong_type(KEYS[2], 'list') or wrong_type(KEYS[3], 'zset')
if err then
  return err
end
-- Data that is not a Redisson lock is refused before any write: never deleted.
local _, _, bad = hold_of(KEYS[1])
if bad then
  return bad
end
local _, stale = purge_stale_heads(KEYS[2], KEYS[3], tonumber(ARGV[1]))
if stale then
  return stale
end
revoke_holders(KEYS[1], ARGV[2])
if redis.call('del', KEYS[1]) == 1 then
  notify_head(KEYS[2], KEYS[4])
  return 1
end
return 0
