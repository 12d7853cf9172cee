-- Native lock: a waiter stops waiting (timeout, cancellation, error). If the
-- lock was handed to it meanwhile and it never claimed it, it is passed on;
-- a non-fair waiter that leaves a free lock wakes the next one (it may have
-- been the one a release woke).
-- KEYS[1..3] see lock_prelude.lua
-- ARGV[1] owner, ARGV[2] the acquisition's secret (only its own unclaimed
-- grant is passed on, never a later acquisition's of the same owner),
-- ARGV[3] 'f' fair or 'n' non-fair
-- Returns 0 not queued, 1 left the queue, 2 passed on a grant it had not taken.
-- Cost: O(log N).
-- Every key is read before the first write (type checks; a lock value not
-- of this layout is refused).
local owner, fair = ARGV[1], string.byte(ARGV[3]) ~= 110
local lock, bad = lock_of(redis.pcall('get', KEYS[1]))
if bad then
  return bad
end
local record, place = redis.call('hget', KEYS[3], owner), redis.call('zscore', KEYS[2], owner)
local queued = (record or place) and 1 or 0
if queued == 1 then
  leave_line(owner)
end
if lock.owner == owner and flagged(lock.flags, 'u') and lock.nonce == ARGV[2] then
  -- The id of the release that handed it over goes on: that release, sent
  -- again, still finds it (the grant nobody took is no hold in between).
  release_fully(lock, lock.request, fair, FREE_MS)
  return 2
end
if queued == 1 and lock.owner and flagged(lock.flags, 'k') then
  -- Held past a woken waiter (k): the leaver may be that waiter, so the
  -- holder's release must wake the next one.
  rewrite(lock, decimal(lock.count), with_flags(lock.flags, '', 'k'), lock.nonce)
end
if queued == 1 and not fair and not lock.owner and (lock.absent or flagged(lock.flags, 'w')) then
  -- Free with others in line: the leaver may have been the waiter a
  -- release woke. Wake the next (or hand it the lock if it waited long).
  local now, now_us = server_now()
  local head, arrival, next_record = first_live(now)
  if head and starving(arrival, now_us) and not exhausted(lock) then
    hand_off(head, next_record, lock.token, lock.request, now, now_us)
  elseif head then
    redis.call('publish', string.sub(KEYS[1], 1, -5) .. 'wake:' .. head, 'free')
  end
end
return queued
