-- Native semaphore: make the capacity (the permits in all) ARGV[1]. A
-- raise admits the line's head while it fits; a capacity beneath what is
-- held admits nobody until enough comes back, and a waiter that asks for
-- more than the new capacity is woken when it reaches the head of the
-- line ('refused'): its next attempt gets the error and leaves the line.
-- KEYS[1..4] see weighted_prelude.lua
-- ARGV[1] the capacity, ARGV[2] waiter ttl ms (for a waiter without a
-- record), ARGV[3] channel prefix
-- Returns {the capacity before (-1: none stored), used}. Cost: O(log N)
-- plus the grants it makes.
local capacity = counter(ARGV[1])
if not capacity then
  return redis.error_reply('ERR fairlock: the capacity must be a decimal integer')
end
-- The new capacity is also what a meta without one counts a hold whose
-- key was lost while its lease runs as (sem_read: the whole capacity):
-- with nil it would count as nothing, and that `used` is stored below.
local err = weighted_check_types(true) or read_meta() or sem_read(capacity)
if err then
  return err
end
local before = sem.stored and sem.capacity or -1
sem.capacity = capacity
sem_write()
if redis.call('pttl', KEYS[4]) == -1 then
  -- A new meta: it goes as every meta goes (after_release keeps it while
  -- anybody holds or waits).
  redis.call('pexpire', KEYS[4], META_GRACE_MS)
end
after_release(ARGV[3])
return {before, sem.used}
