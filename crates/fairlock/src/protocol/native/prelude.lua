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

-- How long the meta hash outlives the last use of the lock (the release
-- result caches live as long). Its counters never fall below the server
-- clock, so they keep increasing after it expired.
local META_GRACE_MS = 20000
-- At most this many dead waiters are dropped per call from the middle of
-- the line (bounded work per call; each dead waiter is dropped once). Dead
-- waiters at the head are always dropped, however many (see first_live).
-- As text: the ZRANGE argument.
local PURGE_LIMIT = '64'

-- Server time in milliseconds and in microseconds.
local function server_now()
  local t = redis.call('time')
  local sec, usec = tonumber(t[1]), tonumber(t[2])
  return sec * 1000 + math.floor(usec / 1000), sec * 1000000 + usec
end

-- An integer (0 <= n < 2^53) as a decimal string: Lua's own conversion
-- (and Redis's, of a number passed to redis.call) would use exponents, and
-- '%.0f' is exact but costly (floating-point formatting with
-- multi-precision arithmetic). '%d' formats a C long: the same text, but
-- only where a long holds n: always below 2^31; above, where it has 64
-- bits, not on a 32-bit build. A 32-bit long is at most 11 characters
-- ('-2147483648'), so a longer text proves the long wide enough; the few
-- numbers between 2^31 and 10^11 (leases of weeks) are written with
-- '%.0f'. Tokens, arrival numbers and server times are all longer. From
-- 2^63 up (only data another program wrote can lead there: an expiry set
-- near the largest time Redis keeps) no long holds n: '%.0f' too.
local function decimal(n)
  local text = string.format('%d', n)
  if n < 2147483648 or (#text > 11 and n < 9223372036854775808) then
    return text
  end
  return string.format('%.0f', n)
end

-- The meta counters ('token', 'seq'), read and checked by read_meta()
-- before a script's first write; next_counter() uses (and updates) them.
local meta

-- Read meta's counters, once per script, before its first write: a value
-- that is not a counter (see counter()) is refused with NOTALOCK, and
-- nothing is written. Returns the error reply, or false.
local function read_meta()
  local values = redis.call('hmget', KEYS[4], 'token', 'seq')
  local token, seq = counter(values[1]), counter(values[2])
  if values[1] and not token then
    return not_a_lock(4, 'meta field token is not a decimal integer below 2^53')
  end
  if values[2] and not seq then
    return not_a_lock(4, 'meta field seq is not a decimal integer below 2^53')
  end
  meta = {token = token or 0, seq = seq or 0}
  return false
end

-- Next value of a strictly increasing counter: above the last value and not
-- below the server clock in microseconds. read_meta() must have run.
-- Returns the value and its text (decimal).
local function next_counter(field, now_us)
  local value = math.max(meta[field] + 1, now_us)
  local text = decimal(value)
  meta[field] = value
  redis.call('hset', KEYS[4], field, text)
  return value, text
end

-- The lock hash's fields (HGETALL) as {owner, token, count, nonce, partial},
-- or nil and NOTALOCK when they are not a lock's: every field one of
-- owner/count/token/claimed/nonce/partial; owner, count (>= 1) and token
-- present, count and token counters, claimed 0 or 1, partial 1. An empty
-- list is a free lock ({}).
local LOCK_FIELDS = {owner = true, count = true, token = true, claimed = true, nonce = true, partial = true}
local function lock_of(fields)
  local lock = {}
  if #fields > 12 then
    return nil, not_a_lock(1, 'the hash has more fields than a lock has')
  end
  for i = 1, #fields, 2 do
    if not LOCK_FIELDS[fields[i]] then
      return nil, not_a_lock(1, 'field ' .. fields[i] .. ' is not a lock field')
    end
    lock[fields[i]] = fields[i + 1]
  end
  if #fields == 0 then
    return lock
  end
  if not lock.owner or not counter(lock.token) or (counter(lock.count) or 0) < 1
      or (lock.claimed and lock.claimed ~= '0' and lock.claimed ~= '1')
      or (lock.partial and lock.partial ~= '1') then
    return nil, not_a_lock(1, 'the lock fields are malformed (owner, count and token must be set, as counters)')
  end
  return lock
end

-- Make `key` live at least `ms` longer (never shortens a TTL; a key without
-- one gets it). Every key of a lock thus expires once nobody uses the name.
-- `text`: `ms` as text when the caller has it (an argument), else nil.
-- (Numbers go to Redis as text: redis.call would format a Lua number with
-- sprintf's floating-point '%.17g'.)
local function keep(key, ms, text)
  local left = redis.call('pttl', key)
  if left ~= -2 and left < ms then
    redis.call('pexpire', key, text or decimal(ms))
  end
end

-- keep() for the line's three keys (queue, liveness, records): a waiter is
-- in the queue iff in the liveness set (invariant 2), the three are kept
-- together with the same TTL, so one PTTL tells all three (the records get
-- their own keep() when a waiter queues, see acquire.lua). `text`: `ms`
-- as text (the waiter ttl argument).
local function keep_line(ms, text)
  local left = redis.call('pttl', KEYS[2])
  if left ~= -2 and left < ms then
    redis.call('pexpire', KEYS[2], text)
    redis.call('pexpire', KEYS[3], text)
    redis.call('pexpire', KEYS[5], text)
  end
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
  local dead = redis.call('zrange', KEYS[3], '-inf', decimal(now), 'byscore', 'limit', '0', PURGE_LIMIT)
  for _, owner in ipairs(dead) do
    redis.call('zrem', KEYS[2], owner)
    redis.call('zrem', KEYS[3], owner)
    redis.call('hdel', KEYS[5], owner)
  end
end

-- The first waiter in line whose liveness has not passed. Dead waiters
-- ahead of it are dropped, each once, however many there are: a crashed
-- process's thousand waiters cost the live one behind them nothing but
-- this call's time.
local function first_live(now)
  while true do
    local head = redis.call('zrange', KEYS[2], '0', '0')[1]
    if not head then
      return nil
    end
    local alive_until = tonumber(redis.call('zscore', KEYS[3], head))
    if alive_until and alive_until > now then
      return head
    end
    leave_queue(head)
  end
end

-- Is anybody queued? Also the queue key's type check (a read that fails on
-- another type).
local function anybody_waits()
  return redis.call('zrange', KEYS[2], '0', '0')[1] ~= nil
end
