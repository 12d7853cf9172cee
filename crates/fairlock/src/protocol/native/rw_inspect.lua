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
local state, bad = inspect_state('count')
if bad then
  return bad
end
return state
