-- Fair lock: release one hold.
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines, KEYS[4] channel prefix,
-- KEYS[5] unlock result cache of this request
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] now (client clock, ms), ARGV[4] cache ttl ms
-- Returns 1 released, 0 still held (count decremented), -1 held by another owner,
-- -2 the lock did not exist (Redisson's effects; it would answer 1).
--
-- Type checks without TYPE: every key's first touch is a read (GET, HGETALL,
-- LINDEX, ZSCORE when somebody waits), so another type fails before
-- anything is written.
-- A retried request answers what the first one did.
local cached = redis.call('get', KEYS[5])
if cached then
  return tonumber(cached)
end
local owner, lease, now, cache_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local exists, held, bad = hold_of(KEYS[1], owner)
if bad then
  return bad
end

local head, stale = purge_stale_heads(KEYS[2], KEYS[3], now)
if stale then
  return stale
end

if not exists then
  notify(head, KEYS[4])
  -- Cache what is answered, so that a retry after a lost reply says the
  -- same (only this client reads its own request's cache).
  redis.call('set', KEYS[5], -2, 'px', cache_ttl)
  return -2
end
if not held then
  return -1
end
if held > 1 then
  redis.call('hincrby', KEYS[1], owner, -1)
  -- GT: releasing one hold never cuts the lease of the holds left (a
  -- shorter-leased hold released before a longer one).
  redis.call('pexpire', KEYS[1], lease, 'gt')
  redis.call('set', KEYS[5], 0, 'px', cache_ttl)
  return 0
end
-- The last hold: Redisson counts down to 0 and deletes the hash; deleting
-- it at once leaves the same state.
-- The cache first: under maxmemory (OOM) SET is refused before any effect,
-- while DEL would not be (the OOM state of a script is fixed when it starts).
redis.call('set', KEYS[5], 1, 'px', cache_ttl)
redis.call('del', KEYS[1])
notify(head, KEYS[4])
return 1
