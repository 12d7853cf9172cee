-- Native read-write lock: the whole state at one instant (read-only; O(N)
-- in holders and waiters, for diagnostics).
-- KEYS[1..4] see weighted_prelude.lua
-- Returns {holders as a flat list [id, count, token, pttl, ...] (those whose
-- hold key lives), the line's ids in order, [id, liveness deadline ms,
-- ...], server now ms, [client, label, ...] (holders' and waiters')}.
local err = rw_check_types()
if err then
  return err
end
local state, bad = inspect_state('count')
if bad then
  return bad
end
return state
