-- Read a lock's whole state at one instant (read-only).
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines,
-- KEYS[4] fairlock's client labels of the lock
-- Returns {holders (HGETALL), lock pttl, queue (LRANGE), deadlines (ZRANGE
-- WITHSCORES), labels (HGETALL; empty when the key holds another type)}.
local err = wrong_type(KEYS[1], 'hash') or wrong_type(KEYS[2], 'list') or wrong_type(KEYS[3], 'zset')
if err then
  return err
end
local _, _, bad = hold_of(KEYS[1])
if bad then
  return bad
end
local labels = KEYS[4] and redis.pcall('hgetall', KEYS[4])
if type(labels) ~= 'table' or labels.err then
  labels = {}
end
return {
  redis.call('hgetall', KEYS[1]),
  redis.call('pttl', KEYS[1]),
  redis.call('lrange', KEYS[2], 0, -1),
  redis.call('zrange', KEYS[3], 0, -1, 'withscores'),
  labels,
}
