-- fairlock native prelude, prepended to every native-protocol script.
--
-- Every script passes the lock's keys in this order:
--   KEYS[1] lock hash: owner, count (holds), token (fencing token),
--           claimed (0 while a handoff waits for its new holder's claim)
--   KEYS[2] queue: sorted set, owner -> arrival number (FIFO order)
--   KEYS[3] liveness: sorted set, owner -> deadline (server ms); a waiter
--           refreshes it while it waits and is skipped once it passed
--   KEYS[4] meta hash: last arrival number ('seq'), last fencing token ('token')
--   KEYS[5] requested leases: hash, owner -> lease ms of each waiter
-- All time is the Redis server's (TIME); no client clock is ever used.

-- How long the meta hash outlives its last use. Its counters also never fall
-- below the server clock, so they keep increasing after it expired.
local META_TTL_MS = 7 * 24 * 3600 * 1000
-- At most this many dead waiters are dropped per call (bounded work per call;
-- each dead waiter is dropped once).
local PURGE_LIMIT = 64

-- Server time in milliseconds and in microseconds.
local function server_now()
  local t = redis.call('time')
  local sec, usec = tonumber(t[1]), tonumber(t[2])
  return sec * 1000 + math.floor(usec / 1000), sec * 1000000 + usec
end

-- An integer as a decimal string (Lua's own conversion would use exponents).
local function decimal(n)
  return string.format('%.0f', n)
end

-- Next value of a strictly increasing counter: above the last value and not
-- below the server clock in microseconds.
local function next_counter(field, now_us)
  local last = tonumber(redis.call('hget', KEYS[4], field) or '0')
  local value = math.max(last + 1, now_us)
  redis.call('hset', KEYS[4], field, decimal(value))
  redis.call('pexpire', KEYS[4], META_TTL_MS)
  return value
end

-- Remove `owner` from the queue (and its liveness and lease); 1 if it was queued.
local function leave_queue(owner)
  if redis.call('zrem', KEYS[2], owner) == 0 then
    return 0
  end
  redis.call('zrem', KEYS[3], owner)
  redis.call('hdel', KEYS[5], owner)
  return 1
end

-- Drop waiters whose liveness deadline passed, wherever they are in line.
local function purge_dead(now)
  local dead = redis.call('zrange', KEYS[3], '-inf', now, 'byscore', 'limit', 0, PURGE_LIMIT)
  for _, owner in ipairs(dead) do
    redis.call('zrem', KEYS[2], owner)
    redis.call('zrem', KEYS[3], owner)
    redis.call('hdel', KEYS[5], owner)
  end
end

-- Make `owner` the holder of the free lock (no lock key) under a new fencing
-- token, expiring after `expire_ms`. `claimed`: 1 when the caller itself
-- takes it, 0 for a handoff its new holder has not acted on yet.
local function take(owner, expire_ms, now_us, claimed)
  local token = next_counter('token', now_us)
  redis.call('hset', KEYS[1], 'owner', owner, 'count', 1, 'token', decimal(token), 'claimed', claimed)
  redis.call('pexpire', KEYS[1], expire_ms)
  return token
end

-- Hand the free lock to the first waiter and tell it on its channel. Until
-- the new holder claims it (extends it to its lease), the grant lasts only
-- `waiter_ttl`, so a grant to a waiter that just died is reclaimed quickly.
-- Returns the new holder, or false when nobody waits.
local function hand_off(channel_prefix, waiter_ttl, now_us)
  -- The message carries the token and the server time of the grant (ms),
  -- so that a waiter that reads it late (its process was paused) can tell.
  local head = redis.call('zrange', KEYS[2], 0, 0)[1]
  if not head then
    return false
  end
  local lease = tonumber(redis.call('hget', KEYS[5], head) or waiter_ttl)
  leave_queue(head)
  local token = take(head, math.min(lease, waiter_ttl), now_us, 0)
  redis.call('publish', channel_prefix .. ':' .. head,
    'grant:' .. decimal(token) .. ':' .. decimal(math.floor(now_us / 1000)))
  return head
end

-- The holder is gone: hand the lock to the next live waiter, or free it and
-- wake the non-fair waiters.
local function release_fully(channel_prefix, waiter_ttl, now, now_us)
  purge_dead(now)
  redis.call('del', KEYS[1])
  if not hand_off(channel_prefix, waiter_ttl, now_us) then
    redis.call('publish', channel_prefix, 'free')
  end
end

local function check_types()
  return wrong_type(KEYS[1], 'hash') or wrong_type(KEYS[2], 'zset') or wrong_type(KEYS[3], 'zset')
    or wrong_type(KEYS[4], 'hash') or wrong_type(KEYS[5], 'hash')
end
