-- Read-write lock (Redisson's RReadWriteLock): take a write hold.
-- KEYS[1] lock hash (the name)
-- ARGV[1] lease ms, ARGV[2] the writer 'CLIENT:THREAD:write', ARGV[3] its
--   write hold count before this acquisition (see rw_read_acquire.lua)
-- KEYS[2], ARGV[4] (optional): the lock's client labels and this client's label
-- Returns {1, 1} acquired, {2, count} re-entered, {3, pttl} busy, {5} the
-- owner holds a read hold and no write hold: it would wait for itself
-- forever (an upgrade; Redisson lets it hang, issue 4796).
local lease, writer = ARGV[1], ARGV[2]
local done, state = acquire_start(writer, ARGV[3], KEYS[2], ARGV[4], lease)
if done then
  return done
end
local held = state.counts[writer]
if not state.mode then
  redis.call('hset', KEYS[1], 'mode', 'write', writer, 1)
  redis.call('pexpire', KEYS[1], lease)
  write_label(KEYS[2], writer, ARGV[4], lease)
  return {1, 1}
end
if state.mode == 'write' and held then
  local count = redis.call('hincrby', KEYS[1], writer, 1)
  -- GT: a re-entry never cuts the lease of the owner's other holds
  -- (Redisson adds the lease to what is left; fairlock's locks never
  -- lengthen a lease beyond what some hold asked for).
  redis.call('pexpire', KEYS[1], lease, 'gt')
  write_label(KEYS[2], writer, ARGV[4], lease)
  return {2, count}
end
if state.counts[string.sub(writer, 1, -7)] then
  return {5}
end
return {3, math.max(0, redis.call('pttl', KEYS[1]))}
