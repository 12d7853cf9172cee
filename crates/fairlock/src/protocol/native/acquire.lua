-- Native lock: acquire, re-enter, claim a grant, or wait in line (and keep
-- the place alive: a waiter calls this at least every waiter_ttl / 3).
-- KEYS[1..5] see the prelude
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] waiter ttl ms, ARGV[4] channel prefix,
-- ARGV[5] 'fair' or 'nonfair', ARGV[6] 'queue' (wait in line) or 'once',
-- ARGV[7] the owner's hold count before this acquisition, ARGV[8] the
-- waiter's secret for its grant message (see hand_off)
-- KEYS[6], ARGV[9] (optional): the lock's labels and this client's label,
-- written when the owner takes, re-enters or waits (see write_label)
-- Returns {1, token} acquired (or claimed a grant made while it waited;
-- the uncontended take of acquire_fast.lua answers with the token alone),
-- {2, count, token} re-entered, {3, lock pttl, position, server ms} waiting,
-- {4} busy (mode 'once').
-- Cost: O(log N) in the number of waiters (plus dead waiters dropped, each once).
-- The lease and waiter ttl go to Redis (PEXPIRE, the waiter's record) as
-- the argument's text, a decimal integer as the client writes it.
--
-- Type checks: the first touch of the lock (HMGET) and of the queue (ZRANGE)
-- are reads, which fail on another type before anything is written. The
-- other keys are checked with TYPE on every path that touches them, except
-- meta where its counters are read first (HMGET, read_meta; HGET in the
-- uncontended take, acquire_fast.lua, whose only other key it is).
local owner, lease, waiter_ttl, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local fair, queue, base = ARGV[5] == 'fair', ARGV[6] == 'queue', tonumber(ARGV[7])
-- `fields` (HGETALL of the lock) and `waiting` were read by
-- acquire_fast.lua, which took a free lock nobody waits for. Bad data is
-- refused before any write: a lock hash that is not a lock's here, meta's
-- counters below (read_meta, on the paths that may write).
local lock, bad = lock_of(fields)
if bad then
  return bad
end
local holder = lock.owner

if holder == owner then
  local token = counter(lock.token)
  local count = counter(lock.count)
  if waiting then
    local err = check_line_types()
    if err then
      return err
    end
  end
  -- This acquisition took the lock (a handoff to it, or an earlier attempt
  -- whose reply was lost, a re-entry's too): its nonce is in the lock hash,
  -- whatever base the caller read before it queued. One hold above the
  -- base is the same proof from a client of an earlier version (whose
  -- re-entries left the nonce alone); under the owner's turns nothing else
  -- of this owner can have counted it. A base of 0 means the owner held
  -- nothing when this acquisition began: whatever it holds now came from
  -- this acquisition (a handoff its guard has re-entered since, which
  -- replaced the nonce) or from a later one (this is an attempt delivered
  -- late): never a hold to count again.
  if lock.nonce == ARGV[8] or count == base + 1 or base == 0 then
    -- Already done: handed to this waiter while it waited (its wake-up may
    -- be lost), or an earlier attempt whose reply was lost. Claim it.
    if waiting then
      leave_queue(owner)
    end
    redis.call('hset', KEYS[1], 'claimed', '1')
    -- GT: never shortens what another hold of this owner was given.
    redis.call('pexpire', KEYS[1], ARGV[2], 'gt')
    write_label(KEYS[6], owner, ARGV[9], ARGV[2])
    if count == 1 then
      return {1, token}
    end
    return {2, count, token}
  end
  -- Re-entry. The lock records this acquisition's secret, so that an
  -- attempt whose reply was lost is known by the secret alone: a retry
  -- claims instead of counting again, and an undo releases exactly this
  -- hold (release.lua with the secret), whatever releases of the owner's
  -- other holds came in between (they lower the count, never the secret).
  -- An owner's acquisitions take turns (owner.rs), so no other one of
  -- this owner can replace the secret before this one is over.
  -- Claimed too: the owner acts on a handed-over grant it re-enters, and a
  -- give-up naming this secret must never pass the lock on as a grant
  -- nobody took (give_up.lua).
  count = redis.call('hincrby', KEYS[1], 'count', '1')
  redis.call('hset', KEYS[1], 'nonce', ARGV[8], 'claimed', '1')
  -- GT: a re-entry with a shorter lease never cuts the owner's other holds.
  redis.call('pexpire', KEYS[1], ARGV[2], 'gt')
  write_label(KEYS[6], owner, ARGV[9], ARGV[2])
  return {2, count, token}
end

-- Somebody waits, or another owner holds the lock: the line's keys are
-- touched from here on.
local err = check_line_types(true) or read_meta()
if err then
  return err
end
local now, now_us = server_now()
if waiting then
  purge_dead(now)
end

if not holder then
  local head = first_live(now)
  if head and head ~= owner and (fair or starving(head, now_us)) then
    -- Free (its lease ran out, or a non-fair waiter was woken and has not
    -- come yet), but a live waiter is first in line: a fair one, or a
    -- non-fair one that waited too long to be overtaken.
    hand_off(prefix, waiter_ttl, now, now_us)
  else
    -- Non-fair: a free lock goes to whoever asks (a woken waiter that
    -- comes later finds it taken and waits for the next wake-up).
    leave_queue(owner)
    write_label(KEYS[6], owner, ARGV[9], ARGV[2])
    local token = take(owner, lease, ARGV[2], now_us, '1', ARGV[8])
    return {1, token}
  end
end

if not queue then
  return {4}
end
local pttl = redis.call('pttl', KEYS[1])
if not redis.call('zscore', KEYS[2], owner) then
  local _, seq = next_counter('seq', now_us)
  redis.call('zadd', KEYS[2], seq, owner)
  redis.call('hset', KEYS[5], owner, ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[8])
  -- The records may lack entries of waiters queued by other versions (and
  -- so have been empty, gone, while the queue was not): keep them on their
  -- own once per waiter; the refreshes keep the three keys together.
  keep(KEYS[5], waiter_ttl, ARGV[3])
end
redis.call('zadd', KEYS[3], decimal(now + waiter_ttl), owner)
-- The line's keys outlive the longest-lived waiter's place, and no more.
keep_line(waiter_ttl, ARGV[3])
keep(KEYS[4], waiter_ttl + META_GRACE_MS)
write_label(KEYS[6], owner, ARGV[9], ARGV[3])
return {3, pttl, redis.call('zrank', KEYS[2], owner) + 1, now}
