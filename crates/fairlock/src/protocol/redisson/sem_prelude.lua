-- fairlock prelude of the redisson semaphore scripts (Redisson's
-- RPermitExpirableSemaphore and RSemaphore), prepended after common.lua.
--
-- KEYS[1] is the name itself: a string with the decimal count of the
-- available permits (Redisson's `setPermits` may leave it negative).
-- The expirable kind keeps its taken permits in KEYS[2], the sorted set
-- '{NAME}:timeout': member = the raw 16-byte permit id, score = the end of
-- its lease in epoch ms on the taking client's clock, or NOEXP (no lease).
-- KEYS[3] (KEYS[2] for the plain kind) is the channel 'redisson_sc:{NAME}'.
-- Permit ids travel to and from these scripts as 32 hex digits (script
-- arguments are text here); Redis holds the raw bytes, as Redisson writes.

-- Redisson's score of a permit without a lease (Long.MAX_VALUE / 10000).
local NOEXP = '922337203685477'
-- Members per ZADD or ZREM call: unpack() is bounded by Lua's C stack.
local CHUNK = 1000

-- The available count under `key`: a number, false when the key is absent,
-- or (nil, error reply) for data that is not a count (NOTALOCK). A key of
-- another type fails in the GET itself, before anything is written.
local function available_of(key)
  local value = redis.call('get', key)
  if not value then
    return false
  end
  local digits = string.match(value, '^%-?(%d+)$')
  if not digits or #digits > 16 or tonumber(digits) >= MAX_COUNTER then
    return nil, not_a_lock(1, "a Redisson semaphore's name holds the decimal count of its available permits")
  end
  return tonumber(value)
end

-- A permit id from its 32 hex digits to its 16 raw bytes, and back.
local function from_hex(hex)
  return (string.gsub(hex, '%x%x', function(pair)
    return string.char(tonumber(pair, 16))
  end))
end

local function to_hex(raw)
  return (string.gsub(raw, '.', function(byte)
    return string.format('%02x', string.byte(byte))
  end))
end

-- ZREM every one of `members` from `key`; the number removed.
local function zrem_all(key, members)
  local removed = 0
  for i = 1, #members, CHUNK do
    removed = removed + redis.call('zrem', key, unpack(members, i, math.min(i + CHUNK - 1, #members)))
  end
  return removed
end

-- The start of every expirable semaphore script but set_permits: read
-- both keys (a key of another type, or a count that is not one, fails
-- here, before any write); initialise the count with `init` when it is
-- absent (Redisson's trySetPermits: SET and publish it; `init` '' leaves
-- it absent); then reclaim the permits whose lease ended at or before
-- `now`, at most `limit` of them (all with nil): remove them, add them to
-- the count and publish the new count when it is above 0 (Redisson's
-- step, the only way a crashed holder's permit comes back).
-- Returns (available) or (nil, error reply).
local function open_expirable(init, now, limit)
  local available, bad = available_of(KEYS[1])
  if bad then
    return nil, bad
  end
  local expired
  if limit then
    expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, limit)
  else
    expired = redis.call('zrangebyscore', KEYS[2], 0, now)
  end
  if not available then
    available = 0
    if init ~= '' then
      redis.call('set', KEYS[1], init)
      redis.call('publish', KEYS[3], init)
      available = tonumber(init)
    end
  end
  if #expired > 0 then
    zrem_all(KEYS[2], expired)
    available = redis.call('incrby', KEYS[1], #expired)
    if available > 0 then
      redis.call('publish', KEYS[3], available)
    end
  end
  return available
end
