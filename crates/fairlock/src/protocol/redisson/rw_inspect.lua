-- Read-write lock (Redisson's RReadWriteLock): its whole state at one
-- instant (read-only).
-- KEYS[1] lock hash, KEYS[2] fairlock's client labels of the lock (optional)
-- Returns {the hash (HGETALL), its pttl, labels (HGETALL; empty when the
-- key holds another type)}.
-- rw_state's HGETALL is the first touch: another type fails there,
-- before anything is written.
local _, bad = rw_state(KEYS[1])
if bad then
  return bad
end
local labels = KEYS[2] and redis.pcall('hgetall', KEYS[2])
if type(labels) ~= 'table' or labels.err then
  labels = {}
end
return {redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1]), labels}
