-- Native semaphore: release every hold, tell each holder's client, and
-- admit the line's head while it fits.
-- KEYS[1..4] see weighted_prelude.lua
-- ARGV[1] waiter ttl ms (for a waiter without a record), ARGV[2] channel
-- prefix, ARGV[3] revocation channel prefix (the holder's client id is
-- appended)
-- Returns {holds removed, the permits they held}. Cost: O(H) in the
-- holders.
-- Every hold key is read before anything is written: one that is not a
-- semaphore's hold is refused (NOTALOCK), and nothing is deleted.
local err = weighted_check_types(true) or read_meta() or sem_read(nil)
if err then
  return err
end
local removed, bad, permits = force_release(function()
  return true
end, ARGV[3], ARGV[2], tonumber(ARGV[1]))
if bad then
  return bad
end
return {removed, permits}
