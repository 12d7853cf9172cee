-- Native weighted engine (read-write lock, semaphore): a waiter stops
-- waiting (timeout, cancellation, error). A grant made to this acquisition that it never claimed is
-- released; either way the line's head may now fit (a writer that left
-- the head lets the readers behind it in, a large request the small ones)
-- and is admitted.
-- KEYS[1..4] see weighted_prelude.lua
-- ARGV[1] holder id, ARGV[2] waiter ttl ms, ARGV[3] channel prefix,
-- ARGV[4] the acquisition's secret (only its own unclaimed grant is
-- released, never a later acquisition's of the same id)
-- Returns 0 not queued, 1 left the queue, 2 released a grant it had not
-- taken. Cost: O(log N) plus the grants it makes.
local err = weighted_check_types(true) or read_meta() or kind.check()
if err then
  return err
end
local id = ARGV[1]
local mine, bad = hold_of(id)
if bad then
  return bad
end
local queued = leave(id)
if mine.owner and mine.claimed == '0' and mine.nonce == ARGV[4] then
  drop_hold(id, mine.weight)
  after_release(ARGV[3])
  return 2
end
if queued == 1 then
  after_release(ARGV[3])
end
return queued
