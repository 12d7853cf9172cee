-- Native read-write lock: release every hold of one side (every reader,
-- or the writer), tell each holder's client, and admit the line's head
-- while it fits.
-- KEYS[1..4] see weighted_prelude.lua
-- ARGV[1] waiter ttl ms (for a waiter without a record), ARGV[2] channel
-- prefix, ARGV[3] revocation channel prefix (the holder's client id is
-- appended), ARGV[4] the side: 'read' or 'write'
-- Returns the number of holds removed. Cost: O(H) in the holders.
-- Every hold key is read before anything is written: one that is not a
-- lock's hold is refused (NOTALOCK), and nothing is deleted.
local err = rw_check_types(true) or read_meta()
if err then
  return err
end
local write_side = ARGV[4] == 'write'
local removed, bad = force_release(function(id)
  return is_write(id) == write_side
end, ARGV[3], ARGV[2], tonumber(ARGV[1]))
if bad then
  return bad
end
return removed
