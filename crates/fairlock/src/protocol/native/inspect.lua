-- Native lock: the whole state at one instant (read-only; O(N), for diagnostics).
-- KEYS[1..3] see lock_prelude.lua
-- Returns {holder ('' when free), hold count, token (of the hold, or the
-- last one when free; 0 when unknown), lock pttl, waiters in order,
-- [waiter, liveness deadline ms]..., server now ms, [client, label]... (the
-- holder's and the waiters' labels, each client id once)}.
local lock, bad = lock_of(redis.pcall('get', KEYS[1]))
if bad then
  return bad
end
local labels, seen = {}, {}
local function label_of(owner, label)
  local client = string.match(owner, '^(.*):[^:]*$')
  if client and label and label ~= '' and not seen[client] then
    seen[client] = true
    labels[#labels + 1] = client
    labels[#labels + 1] = label
  end
end
if lock.owner then
  label_of(lock.owner, lock.label)
end
local line = redis.call('zrange', KEYS[2], 0, -1)
local deadlines = {}
for _, waiter in ipairs(line) do
  local record = record_of(redis.call('hget', KEYS[3], waiter))
  deadlines[#deadlines + 1] = waiter
  deadlines[#deadlines + 1] = record and decimal(record.deadline) or '0'
  label_of(waiter, record and record.label)
end
return {
  lock.owner or '',
  lock.count,
  lock.text or '0',
  redis.call('pttl', KEYS[1]),
  line,
  deadlines,
  server_now(),
  labels,
}
