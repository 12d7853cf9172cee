-- Native read-write lock: release every hold of one side (every reader,
-- or the writer), tell each holder's client, and admit the line's head
-- while it fits.
-- KEYS[1..5] see weighted_prelude.lua
-- ARGV[1] waiter ttl ms (for a waiter without a record), ARGV[2] channel
-- prefix, ARGV[3] revocation channel prefix (the holder's client id is
-- appended), ARGV[4] the side: 'read' or 'write'
-- Returns the number of holds removed. Cost: O(H) in the holders.
-- Every hold key is read before anything is written: one that is not a
-- lock's hold is refused (NOTALOCK), and nothing is deleted.
local err = rw_check_types() or read_meta()
if err then
  return err
end
local write_side = ARGV[4] == 'write'
local ids = {}
for _, id in ipairs(redis.call('zrange', KEYS[1], 0, -1)) do
  if is_write(id) == write_side then
    local hold, bad = hold_of(id)
    if bad then
      return bad
    end
    ids[#ids + 1] = {id, hold.owner ~= nil}
  end
end
local removed = 0
for _, entry in ipairs(ids) do
  drop_hold(entry[1])
  if entry[2] then
    revoke_holder(ARGV[3], entry[1])
    removed = removed + 1
  end
end
after_release(ARGV[2], tonumber(ARGV[1]))
return removed
