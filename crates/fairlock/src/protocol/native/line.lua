-- fairlock native line (key layout version 2): the helpers every native
-- script with a line shares, after common.lua and before its object's own
-- prelude (the lock's lock_prelude.lua; the read-write lock's and the
-- semaphore's weighted_prelude.lua).
--
-- Every such script passes the line's two keys at the same places:
--   KEYS[2] line: sorted set, waiter -> arrival number (FIFO order)
--   KEYS[3] waiters: hash, waiter -> 'DEADLINE:LEASE:TTL:NONCE:LABEL' (its
--           liveness deadline in server ms, the lease it asked for, its own
--           waiter ttl, the secret of its grant message, its client's label;
--           a semaphore's request puts 'WEIGHT:' in front of the label)
-- A waiter's place and its record are written and removed together. Dead
-- waiters are dropped when they reach the head of the line (first_live),
-- each once: a dead waiter further back keeps its place and record (about
-- 300 bytes with a client's id, secret and label) until then, or until the
-- line's keys expire.

-- Server time in milliseconds and in microseconds.
local function server_now()
  local t = redis.call('time')
  local sec, usec = tonumber(t[1]), tonumber(t[2])
  return sec * 1000 + math.floor(usec / 1000), sec * 1000000 + usec
end

-- An integer (0 <= n < 2^53) as decimal text: '%d' where its text proves
-- a C long wide enough (longer than a 32-bit long's 11 characters, or
-- below 2^31), else '%.0f' (exact, slower). Lua's own conversion would use
-- exponents, and Redis formats a number passed to redis.call with '%.17g'.
local function decimal(n)
  local text = string.format('%d', n)
  if n < 2147483648 or (#text > 11 and n < 9223372036854775808) then
    return text
  end
  return string.format('%.0f', n)
end

-- A waiter's record: deadline, lease, ttl (numbers), nonce and label, or
-- nil when it is missing or malformed (written by another program: the
-- waiter is then taken for dead, and its next attempt joins the line again).
local function record_of(text)
  local deadline, lease, ttl, nonce, label = string.match(text or '', '^(%d+):(%d+):(%d+):([^:]*):(.*)$')
  deadline, lease, ttl = counter(deadline), counter(lease), counter(ttl)
  if not deadline or not lease or not ttl then
    return nil
  end
  return {deadline = deadline, lease = lease, ttl = ttl, nonce = nonce, label = label}
end

-- Take `waiter` out of the line (its place and its record).
local function leave_line(waiter)
  redis.call('zrem', KEYS[2], waiter)
  redis.call('hdel', KEYS[3], waiter)
end

-- The first waiter in line whose liveness deadline has not passed, with
-- its arrival number and record. Dead waiters ahead of it are dropped,
-- each once, however many: a crashed process's thousand waiters cost the
-- live one behind them nothing but this call's time. The line's and the
-- records' first touches here are reads (a key of another type fails
-- before anything is written).
local function first_live(now)
  while true do
    local top = redis.call('zrange', KEYS[2], '0', '0', 'withscores')
    if not top[1] then
      return nil
    end
    local record = record_of(redis.call('hget', KEYS[3], top[1]))
    if record and record.deadline > now then
      return top[1], tonumber(top[2]), record
    end
    leave_line(top[1])
  end
end

-- Make the line's two keys live at least `ms` longer (`text`: as text),
-- never shorter: they outlive the longest-lived waiter's place, and no
-- more. They are kept together, so one PTTL tells both.
local function keep_line(ms, text)
  local left = redis.call('pttl', KEYS[2])
  if left ~= -2 and left < ms then
    redis.call('pexpire', KEYS[2], text)
    redis.call('pexpire', KEYS[3], text)
  end
end
