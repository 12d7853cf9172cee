-- Native semaphore: the whole state at one instant (read-only; O(N) in
-- holders and waiters, for diagnostics).
-- KEYS[1..4] see weighted_prelude.lua
-- ARGV[1] the capacity of a semaphore that has none stored
-- Returns {holders as a flat list [id, weight, token, pttl, ...] (those
-- whose hold key lives), the line's ids in order, [id, liveness deadline
-- ms, ...], server now ms, [client, label, ...] (holders' and waiters'),
-- capacity, 1 when meta stores the capacity (else 0: the semaphore has none
-- yet, or forgot it, and the capacity shown is ARGV[1]), the permits each
-- queued request asks for (in queue order; 0 when its record names none)}.
-- What is taken is the sum of the live holders' weights: a holder whose
-- lease ended and who was not reclaimed yet is not counted.
local err = weighted_check_types()
if err then
  return err
end
local capacity = redis.call('hget', KEYS[4], 'capacity')
if capacity and not counter(capacity) then
  return not_a_lock(4, 'meta field capacity is not a decimal integer below 2^53')
end
local state, bad, records = inspect_state('weight')
if bad then
  return bad
end
state[#state + 1] = counter(capacity) or counter(ARGV[1]) or 0
state[#state + 1] = capacity and 1 or 0
local asked = {}
for i, id in ipairs(state[2]) do
  local weight = records[id] and weight_of(records[id])
  asked[i] = weight or 0
end
state[#state + 1] = asked
return state
