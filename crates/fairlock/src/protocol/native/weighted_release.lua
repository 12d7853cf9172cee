-- Native weighted engine (a read-write lock's side, a semaphore's permits):
-- release one hold; the last one of a holder admits the line's head while
-- it fits (grant messages, as the lock's handoff).
-- KEYS[1..4] see weighted_prelude.lua, KEYS[5] result cache of this request
-- ARGV[1] holder id, ARGV[2] waiter ttl ms (for a waiter without a
-- record), ARGV[3] channel prefix, ARGV[4] cache ttl ms, ARGV[5] the token
-- of the hold being released ('' for any), ARGV[6] the secret of the
-- acquisition being undone ('' for any)
-- Returns 1 released, 0 still held, -2 not held (nor by this acquisition:
-- the same id may hold it under a newer token). Cost: O(log N) plus the
-- grants it makes.
local id = ARGV[1]
local mine, bad = hold_of(id)
if bad then
  return bad
end
-- A retried request answers what the first one did (see the lock's
-- release.lua: a hold under the named token never partly released proves
-- this request has not run yet).
if not (mine.owner and ARGV[5] ~= '' and mine.token == ARGV[5] and not mine.partial) then
  local cached = redis.call('get', KEYS[5])
  if cached then
    return tonumber(cached)
  end
end
if not mine.owner then
  return -2
end
if (ARGV[5] ~= '' and mine.token ~= ARGV[5]) or (ARGV[6] ~= '' and mine.nonce ~= ARGV[6]) then
  return -2
end
local err = weighted_check_types(true) or read_meta() or kind.check()
if err then
  return err
end
local count = counter(mine.count)
if count > 1 then
  -- The cache first (SET ... GET: another type fails before any effect).
  redis.call('set', KEYS[5], '0', 'px', ARGV[4], 'get')
  redis.call('hincrby', hold_key(id), 'count', '-1')
  redis.call('hset', hold_key(id), 'partial', '1')
  return 0
end
redis.call('set', KEYS[5], '1', 'px', ARGV[4], 'get')
drop_hold(id, mine.weight)
after_release(ARGV[3])
return 1
