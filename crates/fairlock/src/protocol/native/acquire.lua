-- Native lock: acquire, re-enter, claim a grant, or wait in line (and keep
-- the place alive: a waiter calls this at least every waiter_ttl / 3).
-- KEYS[1..3] see lock_prelude.lua
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] waiter ttl ms, ARGV[4] mode:
-- 'f' fair or 'n' non-fair, then 'q' (wait in line) or 'o' (once),
-- ARGV[5] the owner's hold count before this acquisition, ARGV[6] the
-- acquisition's secret (see hand_off), ARGV[7] this client's label ('' for
-- none: kept with the hold, or with the place in line, for `inspect`)
-- Returns {1, token} acquired (or claimed a grant made while it waited;
-- the uncontended take of acquire_fast.lua answers with the token alone),
-- {2, count, token} re-entered, {3, lock pttl, position, server ms}
-- waiting, {4} busy (mode once).
-- Cost: O(log N) in the number of waiters (plus dead waiters dropped at the
-- head of the line, each once).
--
-- Type checks without TYPE: the lock's first touch is GET (acquire_fast.lua;
-- another type is told apart by layout_error), and on every path that
-- writes, the line's and the records' first touches are reads (ZRANGE,
-- ZSCORE, ZRANK, HGET) that fail on another type before anything is written.
local owner, lease_text, ttl_text, label = ARGV[1], ARGV[2], ARGV[3], ARGV[7]
local lease, waiter_ttl = tonumber(lease_text), tonumber(ttl_text)
local fair, queue, base, nonce = string.byte(ARGV[4], 1) ~= 110, string.byte(ARGV[4], 2) == 113,
  tonumber(ARGV[5]), ARGV[6]
local lock, bad = lock_of(raw)
if bad then
  return bad
end

if lock.owner == owner then
  -- In line (a waiter whose grant or earlier attempt made it the holder):
  -- it leaves, after the lock's writes. Its place and record are read
  -- first (the line's and the records' type checks).
  local leaving = false
  if flagged(lock.flags, 'w') then
    local record, place = redis.call('hget', KEYS[3], owner), redis.call('zscore', KEYS[2], owner)
    leaving = record or place
  end
  local count = lock.count
  -- This acquisition took the lock (a handoff to it, or an earlier attempt
  -- whose reply was lost, a re-entry's too): its nonce is in the value,
  -- whatever base the caller read before it queued. One hold above the
  -- base is the same proof; under the owner's turns nothing else of this
  -- owner can have counted it. A base of 0 means the owner held nothing
  -- when this acquisition began: whatever it holds now came from this
  -- acquisition (a handoff its guard has re-entered since, which replaced
  -- the nonce) or from a later one (this is an attempt delivered late):
  -- never a hold to count again.
  local reply
  if lock.nonce == nonce or count == base + 1 or base == 0 then
    -- Already done: claim it (a handoff is now confirmed).
    if flagged(lock.flags, 'u') then
      rewrite(lock, decimal(count), with_flags(lock.flags, '', 'u'), lock.nonce)
    end
    reply = count == 1 and {1, lock.token} or {2, count, lock.token}
  else
    -- Re-entry. The value records this acquisition's secret, so that an
    -- attempt whose reply was lost is known by the secret alone (a retry
    -- claims instead of counting again; an undo releases exactly this
    -- hold), whatever releases of the owner's other holds came in between
    -- (they lower the count, never the secret). Claimed too: the owner
    -- acts on a handed-over grant it re-enters, and a give-up naming this
    -- secret must never pass the lock on as a grant nobody took.
    count = count + 1
    rewrite(lock, decimal(count), with_flags(lock.flags, '', 'u'), nonce)
    reply = {2, count, lock.token}
  end
  -- GT: never shortens what another hold of this owner was given.
  redis.call('pexpire', KEYS[1], lease_text, 'gt')
  if leaving then
    leave_line(owner)
  end
  return reply
end

if not lock.owner and exhausted(lock) then
  return not_a_lock(1, 'the lock key holds a token that leaves no next one below 2^53')
end
local now, now_us = server_now()
if not lock.owner then
  -- Free: its last holder released it (a marker) or its key is gone (a
  -- lease ran out, or never used). The first live waiter, if any, is asked
  -- (a read of the line and the records before any write).
  local head, arrival, record = first_live(now)
  if head and head ~= owner and (fair or starving(arrival, now_us)) then
    -- A live waiter is first in line: a fair one, or a non-fair one that
    -- waited too long to be overtaken. It gets the lock; the caller queues.
    hand_off(head, record, lock.token, lock.request, now, now_us)
    lock = {owner = head, flags = 'uw'}
  else
    -- Nobody alive waits before the caller (or a non-fair caller may go
    -- first). The new value keeps w while anybody else is in line.
    local rest, leaving = head, head == owner
    if leaving then
      rest = redis.call('zrange', KEYS[2], '1', '1')[1]
    elseif head then
      -- A non-fair caller may be in line behind a head it overtakes.
      leaving = redis.call('zscore', KEYS[2], owner)
    end
    -- The lock first (the write maxmemory refuses before anything else
    -- changed), then the caller's place.
    local token = decimal(next_token(lock.token, now_us))
    redis.call('set', KEYS[1], held_value(token, '1', rest and 'w' or '', nonce, lock.request, owner, label),
      'px', lease_text)
    if leaving then
      leave_line(owner)
    end
    return {1, tonumber(token)}
  end
end

-- Held by another.
if not queue then
  return {4}
end
-- The caller's record and place (reads: the records' and the line's type
-- checks before any write).
local record = record_of(redis.call('hget', KEYS[3], owner))
local rank = redis.call('zrank', KEYS[2], owner)
-- The record (liveness deadline, lease, waiter ttl, secret, label) is
-- rewritten when a quarter of the waiter ttl has passed since it was
-- written (the waiter calls at least every third: it never lapses while it
-- lives), and when an acquisition of the owner with another secret or
-- lease finds an older one's; else this call writes nothing.
local fresh = rank and record and record.nonce == nonce and record.lease == lease
  and record.deadline - now > waiter_ttl - math.floor(waiter_ttl / 4)
-- Invariant W first: the lock's value says somebody waits (SET is also the
-- write maxmemory refuses before anything else changed). And without k: a
-- waiter is back (the one a release woke, or another), so the next release
-- wakes the head again.
if not fresh and not flagged(lock.flags, 'w') or flagged(lock.flags, 'k') then
  rewrite(lock, decimal(lock.count), with_flags(lock.flags, 'w', 'k'), lock.nonce)
end
if not fresh then
  if not rank then
    -- Joins at the end: an arrival number above the last one's and not
    -- below the server clock in µs.
    local tail = redis.call('zrange', KEYS[2], '-1', '-1', 'withscores')
    redis.call('zadd', KEYS[2], decimal(math.max(tonumber(tail[2] or '0') + 1, now_us)), owner)
    rank = redis.call('zcard', KEYS[2]) - 1
  end
  redis.call('hset', KEYS[3], owner,
    decimal(now + waiter_ttl) .. ':' .. lease_text .. ':' .. ttl_text .. ':' .. nonce .. ':' .. label)
  keep_line(waiter_ttl, ttl_text)
end
return {3, redis.call('pttl', KEYS[1]), rank + 1, now}
