-- Native lock: release whoever holds it, tell the holder's client, and hand
-- the lock to the next live waiter (fair) or wake one (non-fair).
-- KEYS[1..5] see the prelude
-- ARGV[1] waiter ttl ms (for a waiter without a record), ARGV[2] channel
-- prefix, ARGV[3] revocation channel prefix (the holder's client id is
-- appended), ARGV[4] 'fair' or 'nonfair'
-- Returns 1 when a holder was removed, else 0. Cost: O(log N).
-- A lock hash that is not a lock's, or bad meta counters, are refused
-- before any write: application data under the name is never deleted.
local err = check_types(true) or read_meta()
if err then
  return err
end
local lock, bad = lock_of(redis.call('hgetall', KEYS[1]))
if bad then
  return bad
end
local holder = lock.owner
if not holder then
  return 0
end
release_fully(ARGV[2], tonumber(ARGV[1]), ARGV[4] ~= 'nonfair', anybody_waits())
revoke(ARGV[3], holder)
return 1
