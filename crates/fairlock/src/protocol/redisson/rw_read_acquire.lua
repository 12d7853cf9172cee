-- Read-write lock (Redisson's RReadWriteLock): take a read hold.
-- KEYS[1] lock hash (the name)
-- ARGV[1] lease ms, ARGV[2] owner 'CLIENT:THREAD', ARGV[3] the owner's read
--   hold count before this acquisition (finding one more means an earlier
--   attempt whose reply was lost succeeded: it is not counted again)
-- KEYS[2], ARGV[4] (optional; fairlock's, not Redisson's): the lock's client
--   labels and this client's label
-- Returns {1, 1} acquired, {2, count} re-entered, {3, pttl} busy (a writer
-- other than this owner holds it).
--
-- As Redisson: a reader is admitted whenever the lock is free or in read
-- mode, even while writers wait (a stream of readers starves a writer,
-- Redisson issue 5379), and beside its own write hold (a downgrade). Each
-- read hold gets its own timeout key with the hold's lease; the hash lives
-- at least as long as the longest of them.
local lease, owner = ARGV[1], ARGV[2]
local done, state = acquire_start(owner, ARGV[3], KEYS[2], ARGV[4], lease)
if done then
  return done
end
-- As many read holds as a lock may count (MAX_READ_HOLDS): busy until
-- some go.
if state.reads >= MAX_READ_HOLDS then
  return {3, math.max(0, redis.call('pttl', KEYS[1]))}
end
if not state.mode or state.mode == 'read' or state.counts[owner .. ':write'] then
  local count
  if state.mode then
    count = redis.call('hincrby', KEYS[1], owner, 1)
  else
    redis.call('hset', KEYS[1], 'mode', 'read', owner, 1)
    count = 1
  end
  redis.call('set', timeout_key(timeout_prefix(KEYS[1]), owner, count), 1, 'px', lease)
  extend(KEYS[1], lease)
  write_label(KEYS[2], owner, ARGV[4], lease)
  return granted(count)
end
return {3, math.max(0, redis.call('pttl', KEYS[1]))}
