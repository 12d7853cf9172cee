-- Native lock: acquire, re-enter, claim a grant, or wait in line (and keep
-- the place alive: a waiter calls this at least every waiter_ttl / 3).
-- KEYS[1..5] see the prelude
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] waiter ttl ms, ARGV[4] channel prefix,
-- ARGV[5] 'fair' or 'nonfair', ARGV[6] 'queue' (wait in line) or 'once',
-- ARGV[7] the owner's hold count before this acquisition, ARGV[8] the
-- waiter's secret for its grant message (see hand_off)
-- Returns {1, token} acquired (or claimed a grant made while it waited),
-- {2, count, token} re-entered, {3, lock pttl, position, server ms} waiting
-- (position 0 for the non-fair lock), {4} busy (mode 'once').
-- Cost: O(log N) in the number of waiters (plus dead waiters dropped, each once).
local err = check_types()
if err then
  return err
end
local owner, lease, waiter_ttl, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local fair, queue, base = ARGV[5] == 'fair', ARGV[6] == 'queue', tonumber(ARGV[7])
local now, now_us = server_now()
purge_dead(now)

local holder = redis.call('hget', KEYS[1], 'owner')
if holder == owner then
  local token = tonumber(redis.call('hget', KEYS[1], 'token'))
  local count = tonumber(redis.call('hget', KEYS[1], 'count'))
  -- This acquisition took the lock (a handoff to it, or an earlier attempt
  -- whose reply was lost): its nonce is in the lock hash, whatever base the
  -- caller read before it queued. Otherwise an earlier attempt of a
  -- re-entry shows as one hold above the base.
  local ours = redis.call('hget', KEYS[1], 'nonce') == ARGV[8]
  if ours or count == base + 1 then
    -- Already done: handed to this waiter while it waited (its wake-up may
    -- be lost), or an earlier attempt whose reply was lost. Claim it.
    leave_queue(owner)
    redis.call('hset', KEYS[1], 'claimed', 1)
    redis.call('pexpire', KEYS[1], lease)
    if count == 1 then
      return {1, token}
    end
    return {2, count, token}
  end
  -- Re-entry.
  count = redis.call('hincrby', KEYS[1], 'count', 1)
  redis.call('pexpire', KEYS[1], lease)
  return {2, count, token}
end

if not holder then
  local head = fair and first_live(now)
  if head and head ~= owner then
    -- Free (its lease ran out), but a live waiter is first in line.
    hand_off(prefix, waiter_ttl, now, now_us)
  else
    leave_queue(owner)
    return {1, take(owner, lease, now_us, 1, ARGV[8])}
  end
end

if not queue then
  return {4}
end
local pttl = redis.call('pttl', KEYS[1])
if not fair then
  return {3, pttl, 0, now}
end
if not redis.call('zscore', KEYS[2], owner) then
  redis.call('zadd', KEYS[2], decimal(next_counter('seq', now_us)), owner)
  redis.call('hset', KEYS[5], owner, decimal(lease) .. ':' .. decimal(waiter_ttl) .. ':' .. ARGV[8])
end
redis.call('zadd', KEYS[3], now + waiter_ttl, owner)
-- The line's keys outlive the longest-lived waiter's place, and no more.
keep(KEYS[2], waiter_ttl)
keep(KEYS[3], waiter_ttl)
keep(KEYS[5], waiter_ttl)
keep(KEYS[4], waiter_ttl + META_GRACE_MS)
return {3, pttl, redis.call('zrank', KEYS[2], owner) + 1, now}
