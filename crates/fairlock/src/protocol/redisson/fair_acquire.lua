-- Fair lock: try to acquire, or take a place in the queue.
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines (sorted set)
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] waiter slot ms, ARGV[4] now (client clock, ms),
-- ARGV[5] 'queue' (enqueue when busy) or 'once' (never enqueue),
-- ARGV[6] the owner's hold count before this acquisition (finding one more means an
--   earlier attempt whose reply was lost succeeded)
-- KEYS[4], ARGV[7], ARGV[8] (optional; fairlock's, not Redisson's): the
--   lock's client labels, this client's label and its waiter ttl ms (how
--   long a waiter's label lasts between two of its attempts); written when
--   the owner takes, re-enters or waits (see write_label)
-- Returns {1, 1} acquired, {2, count} re-entered, {3, ttl, position} queued
-- (position 0 when already queued), {4, ttl} busy (mode 'once').
--
-- Type checks without TYPE: the lock's first touch is HGETALL, the queue's
-- LINDEX, the deadlines' ZSCORE (somebody waits) or ZREM (nobody does: the
-- first write of that path, so a failure there writes nothing either).
local lease, owner, slot, now = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local function label_for(ms)
  write_label(KEYS[4], owner, ARGV[7], ms)
end

-- A retry whose earlier attempt was granted but whose reply was lost.
local exists, held, bad = hold_of(KEYS[1], owner)
if bad then
  return bad
end
if held == tonumber(ARGV[6]) + 1 then
  label_for(lease)
  if held == 1 then
    return {1, 1}
  end
  return {2, held}
end

local head, stale = purge_stale_heads(KEYS[2], KEYS[3], now)
if stale then
  return stale
end

if not exists then
  if not head then
    -- Nobody waits: Redisson's steps (pop the head, lower the others'
    -- deadlines) have nothing to act on; its ZREM of the owner stays.
    redis.call('zrem', KEYS[3], owner)
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], lease)
    label_for(lease)
    return {1, 1}
  end
  if head == owner then
    -- Free and our turn: leave the queue; everyone behind moves up one slot.
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], owner)
    local behind = redis.call('zrange', KEYS[3], 0, -1)
    for _, waiter in ipairs(behind) do
      redis.call('zincrby', KEYS[3], -slot, waiter)
    end
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], lease)
    label_for(lease)
    return {1, 1}
  end
elseif held then
  -- Held by this owner: re-entry.
  local count = redis.call('hincrby', KEYS[1], owner, 1)
  -- GT: a re-entry with a shorter lease never cuts the owner's other holds
  -- (Redisson sets the new lease as it is; only the TTL differs).
  redis.call('pexpire', KEYS[1], lease, 'gt')
  label_for(lease)
  return {2, count}
end

if ARGV[5] == 'once' then
  return {4, math.max(0, redis.call('pttl', KEYS[1]))}
end

-- Already queued: wait for as long as the lock has left.
if redis.call('zscore', KEYS[3], owner) then
  label_for(ARGV[8])
  return {3, math.max(0, redis.call('pttl', KEYS[1])), 0}
end

-- New waiter: its deadline is one slot after the last waiter's (or after the lease).
local ttl
local last = redis.call('lindex', KEYS[2], -1)
local last_deadline = last and last ~= owner and redis.call('zscore', KEYS[3], last)
if last_deadline then
  if not counter(last_deadline) then
    return not_a_lock(3, 'a waiter deadline is not a decimal integer below 2^53')
  end
  ttl = counter(last_deadline) - now
else
  ttl = redis.call('pttl', KEYS[1])
end
local position = 0
if redis.call('zadd', KEYS[3], ttl + slot + now, owner) == 1 then
  position = redis.call('rpush', KEYS[2], owner)
end
label_for(ARGV[8])
return {3, ttl, position}
