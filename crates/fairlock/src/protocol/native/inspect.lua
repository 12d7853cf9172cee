-- Native lock: the whole state at one instant (read-only; O(N), for diagnostics).
-- KEYS[1..5] see the prelude, KEYS[6] the lock's client labels
-- Returns {lock fields (HGETALL), lock pttl, queue owners in order,
-- liveness (ZRANGE WITHSCORES), server now ms, labels (HGETALL; empty when
-- the key holds another type)}.
local err = check_types()
if err then
  return err
end
local fields = redis.call('hgetall', KEYS[1])
local _, bad = lock_of(fields)
if bad then
  return bad
end
local now = server_now()
local labels = KEYS[6] and redis.pcall('hgetall', KEYS[6])
if type(labels) ~= 'table' or labels.err then
  labels = {}
end
return {
  fields,
  redis.call('pttl', KEYS[1]),
  redis.call('zrange', KEYS[2], 0, -1),
  redis.call('zrange', KEYS[3], 0, -1, 'withscores'),
  now,
  labels,
}
