-- Native lock: release one hold; the last one hands the lock to the next
-- live waiter directly (fair: it proceeds on the message, with no further
-- call) or wakes one waiter (non-fair).
-- KEYS[1..3] see lock_prelude.lua, KEYS[4] the answer cache of this
-- request, 'fairlock:{NAME}:release:REQUEST' (written by a partial release
-- only; REQUEST is also the id a full release leaves in the lock's value)
-- ARGV[1] owner, ARGV[2] the cache's ttl ms, ARGV[3] the token of the hold
-- being released ('' for any hold of the owner), ARGV[4] the secret of the
-- acquisition being undone ('' for any), ARGV[5] 'f' fair or 'n' non-fair
-- Returns 1 released, 0 still held, -1 held by another owner, -2 not held
-- (nor by this acquisition: the same owner may hold it under a newer token).
-- Cost: O(log N).
--
-- A request sent again (its reply lost, or sent from the background) must
-- answer what it did the first time and change nothing more:
-- - a full release left its id in the value: the free marker, or the next
--   hold's value (a handoff, a take from the marker), which carries the id
--   of the release before it: found there, the answer is 1;
-- - a partial release cached 0 under its id and marked the hold p; the
--   cache is read unless the hold this request names is there and was never
--   partly released (then the request cannot have run: a full release would
--   have removed the token, which is never used again).
-- A full release sent again after more than one acquisition since finds
-- neither, and answers -2 or -1 (not held): it never releases another hold.
--
-- Type checks without TYPE: the lock's first touch is GET, the cache's
-- SET ... GET, and a handoff reads the line and the records before it
-- writes (see first_live).
local owner, token, nonce = ARGV[1], ARGV[3], ARGV[4]
local request = string.sub(KEYS[4], #KEYS[1] + 5)
local lock, bad = lock_of(raw)
if bad then
  return bad
end
if request ~= '' and lock.request == request then
  return 1
end
if not (lock.owner == owner and token ~= '' and lock.text == token and not flagged(lock.flags, 'p')) then
  local cached = redis.call('get', KEYS[4])
  if cached then
    return tonumber(cached)
  end
end
if not lock.owner then
  return -2
end
if lock.owner ~= owner then
  return -1
end
if (token ~= '' and lock.text ~= token) or (nonce ~= '' and lock.nonce ~= nonce) then
  -- A later acquisition of the same owner: not ours to release.
  return -2
end
if lock.count > 1 then
  -- The cache first (SET ... GET: the cache key's type check; another type
  -- fails before anything is written; and SET is the write maxmemory
  -- refuses before anything changed).
  redis.call('set', KEYS[4], '0', 'px', ARGV[2], 'get')
  rewrite(lock, decimal(lock.count - 1), with_flags(lock.flags, 'p', ''), lock.nonce)
  return 0
end
if token == '' then
  -- A release that names no hold (unlock_as) is told from a release of the
  -- owner's next hold by its id alone, which the lock's value forgets once
  -- that next hold was taken and released by somebody: its answer is
  -- cached too (read above whenever no token is given), so that a retry
  -- never releases a later hold of the same owner. (SET ... GET first:
  -- the cache's type check, before anything changed.)
  redis.call('set', KEYS[4], '1', 'px', ARGV[2], 'get')
end
release_fully(lock, request, string.byte(ARGV[5]) ~= 110, ARGV[2])
return 1
