-- Read-write lock (Redisson's RReadWriteLock): take a read hold.
-- KEYS[1] lock hash (the name)
-- ARGV[1] lease ms, ARGV[2] owner 'CLIENT:THREAD', ARGV[3] the owner's read
--   hold count before this acquisition (finding one more means an earlier
--   attempt whose reply was lost succeeded: it is not counted again)
-- KEYS[2], ARGV[4] (optional; fairlock's, not Redisson's): the lock's client
--   labels and this client's label
-- Returns {1, 1, found} acquired, {2, count, found} re-entered ({1, 1} or
-- {2, count} when an earlier attempt took it), {3, pttl} busy (a writer
-- other than this owner holds it). `found`: the hash's TTL in ms before
-- this acquisition extended it (-1 when it made the hash; 0 for an owner
-- that already read): a Redisson
-- reader's renewal sets the hash's one TTL to that client's lease, however
-- short, and the watchdog renews early while it finds it so.
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
  -- The hash lives at least the lease (never shortened); what it had is
  -- reported (-1 on a hash just made).
  local found = redis.call('pttl', KEYS[1])
  if found < tonumber(lease) then
    redis.call('pexpire', KEYS[1], lease)
  end
  write_label(KEYS[2], owner, ARGV[4], lease)
  local reply = granted(count)
  -- For an owner that did not read yet: a re-entry's owner is renewed on
  -- the schedule its earlier holds set (its own short explicit hold's TTL
  -- says nothing of other clients).
  reply[3] = state.counts[owner] and 0 or found
  return reply
end
return {3, math.max(0, redis.call('pttl', KEYS[1]))}
