-- Native lock: release one hold; the last one hands the lock to the next
-- live waiter directly (fair: it proceeds on the message, with no further
-- call) or wakes one waiter (non-fair).
-- KEYS[1..5] see the prelude, KEYS[6] result cache of this request
-- ARGV[1] owner, ARGV[2] waiter ttl ms (for a waiter without a record),
-- ARGV[3] channel prefix, ARGV[4] cache ttl ms, ARGV[5] the token of the
-- hold being released ('' for any hold of the owner), ARGV[6] the secret
-- of the acquisition being undone ('' for any), ARGV[7] 'fair' or 'nonfair'
-- Returns 1 released, 0 still held, -1 held by another owner, -2 not held
-- (nor by this acquisition: the same owner may hold it under a newer token).
-- Cost: O(log N).
--
-- Type checks: the lock's, the queue's and the cache's first touches are
-- reads (HMGET, ZRANGE, GET), which fail on another type before anything
-- is written; the other keys are checked when somebody waits (only then
-- are they touched): meta's by its first read (HMGET, read_meta), the
-- others' with TYPE.
local owner = ARGV[1]
-- `lock` (HMGET owner, token, nonce, count, partial) and `waiting` were read
-- by release_fast.lua, which did the uncontended release.
-- A retried request answers what the first one did. A hold whose token this
-- request names, never partly released, proves the request has not run
-- yet: a full release would have removed that token (tokens are never
-- reused), a partial one would have set 'partial'. Only then is the cache
-- not read; it is written on every path that changes something.
if not (lock[1] == owner and ARGV[5] ~= '' and lock[2] == ARGV[5] and not lock[5]) then
  local cached = redis.call('get', KEYS[6])
  if cached then
    return tonumber(cached)
  end
end
if not lock[1] then
  return -2
end
if lock[1] ~= owner then
  return -1
end
if (ARGV[5] ~= '' and lock[2] ~= ARGV[5]) or (ARGV[6] ~= '' and lock[3] ~= ARGV[6]) then
  -- A later acquisition of the same owner: not ours to release.
  return -2
end
-- The hold's count is read before any write (a bad one is refused), and
-- meta's counters when a waiter may be handed the lock (release_fully).
local count = counter(lock[4])
if not count then
  return not_a_lock(1, 'the lock field count is not a decimal integer below 2^53')
end
if waiting then
  local err = check_line_types(true) or read_meta()
  if err then
    return err
  end
end
if count > 1 then
  -- The cache first (SET ... GET: the cache key's type check when its GET
  -- was skipped; another type fails before anything is written).
  redis.call('set', KEYS[6], '0', 'px', ARGV[4], 'get')
  redis.call('hincrby', KEYS[1], 'count', '-1')
  redis.call('hset', KEYS[1], 'partial', '1')
  return 0
end
-- The cache first: under maxmemory (OOM) SET is refused before any effect,
-- while DEL would not be (the OOM state of a script is fixed when it starts).
redis.call('set', KEYS[6], '1', 'px', ARGV[4], 'get')
release_fully(ARGV[3], tonumber(ARGV[2]), ARGV[7] ~= 'nonfair', waiting)
return 1
