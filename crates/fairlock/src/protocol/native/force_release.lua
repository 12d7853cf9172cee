-- Native lock: release whoever holds it, tell the holder's client, and hand
-- the lock to the next live waiter (fair) or wake one (non-fair).
-- KEYS[1..3] see lock_prelude.lua
-- ARGV[1] revocation channel prefix (the holder's client id is appended),
-- ARGV[2] 'f' fair or 'n' non-fair
-- Returns 1 when a holder was removed, else 0. Cost: O(log N).
-- A lock value not of this layout is refused before any write: data that
-- is not a lock's is never deleted.
local lock, bad = lock_of(redis.pcall('get', KEYS[1]))
if bad then
  return bad
end
if not lock.owner then
  return 0
end
-- The id the removed hold carried (of the release that ended the hold
-- before it) goes on, so that release, sent again, still finds it; the
-- removed holder's own release, sent later, finds its hold gone.
release_fully(lock, lock.request, string.byte(ARGV[2]) ~= 110, FREE_MS)
revoke(ARGV[1], lock.owner)
return 1
