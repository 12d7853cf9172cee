-- Native lock: the whole state at one instant (read-only; O(N), for diagnostics).
-- KEYS[1..3] see lock_prelude.lua, KEYS[4] the lock's client labels
-- Returns {holder ('' when free), hold count, token (of the hold, or the
-- last one when free; 0 when unknown), lock pttl, waiters in order,
-- [waiter, liveness deadline ms]..., server now ms, labels (HGETALL; empty
-- when the key holds another type)}.
local lock, bad = lock_of(redis.pcall('get', KEYS[1]))
if bad then
  return bad
end
local line = redis.call('zrange', KEYS[2], 0, -1)
local deadlines = {}
for _, waiter in ipairs(line) do
  local record = record_of(redis.call('hget', KEYS[3], waiter))
  deadlines[#deadlines + 1] = waiter
  deadlines[#deadlines + 1] = record and decimal(record.deadline) or '0'
end
local now = server_now()
local labels = KEYS[4] and redis.pcall('hgetall', KEYS[4])
if type(labels) ~= 'table' or labels.err then
  labels = {}
end
return {
  lock.owner or '',
  lock.count,
  lock.text or '0',
  redis.call('pttl', KEYS[1]),
  line,
  deadlines,
  now,
  labels,
}
