-- Native read-write lock: the whole state at one instant (read-only; O(N)
-- in holders and waiters, for diagnostics).
-- KEYS[1..5] see weighted_prelude.lua, KEYS[6] (optional) the labels
-- Returns {holders as a flat list [id, count, token, pttl, ...] (those whose
-- hold key lives), queue ids in order, liveness (ZRANGE WITHSCORES),
-- server now ms, labels (HGETALL; empty when the key holds another type)}.
local err = rw_check_types()
if err then
  return err
end
local holders = {}
for _, id in ipairs(redis.call('zrange', KEYS[1], 0, -1)) do
  local hold, bad = hold_of(id)
  if bad then
    return bad
  end
  if hold.owner then
    holders[#holders + 1] = id
    holders[#holders + 1] = hold.count
    holders[#holders + 1] = hold.token
    holders[#holders + 1] = redis.call('pttl', hold_key(id))
  end
end
local now = server_now()
local labels = KEYS[6] and redis.pcall('hgetall', KEYS[6])
if type(labels) ~= 'table' or labels.err then
  labels = {}
end
return {
  holders,
  redis.call('zrange', KEYS[2], 0, -1),
  redis.call('zrange', KEYS[3], 0, -1, 'withscores'),
  now,
  labels,
}
