-- Non-fair lock: release whoever holds it.
-- KEYS[1] lock hash, KEYS[2] wake-up channel
-- ARGV[1] revocation channel prefix (fairlock's)
-- Returns 1 when a lock was deleted, else 0.
local err = wrong_type(KEYS[1], 'hash')
if err then
  return err
end
-- Data that is not a Redisson lock is refused before any write: never deleted.
local _, _, bad = hold_of(KEYS[1])
if bad then
  return bad
end
revoke_holders(KEYS[1], ARGV[1])
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], '0')
  return 1
end
return 0
