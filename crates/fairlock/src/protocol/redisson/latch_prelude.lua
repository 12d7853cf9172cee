-- fairlock prelude of the redisson count-down latch scripts (Redisson's
-- RCountDownLatch), after common.lua.
--
-- KEYS[1] the name itself: a string with the decimal count (Redisson
-- deletes it when a count-down takes it to 0 or below).
-- KEYS[2] the channel 'redisson_countdownlatch__channel__{NAME}': '0' when
-- a count-down takes the count to 0, '1' when a count is set or the latch
-- deleted.

-- The count: a number, false when the key is absent, or (nil, error reply)
-- for data that is not a count. A key of another type fails in the GET
-- itself (WRONGTYPE), before anything is written.
local function latch_count()
  local value = redis.call('get', KEYS[1])
  if not value then
    return false
  end
  -- Canonical decimals only, as Redis's DECR takes them: no leading zero,
  -- no '-0' (DECR would fail inside the script).
  local digits = value == '0' and value or string.match(value, '^%-?([1-9]%d*)$')
  if not digits or #digits > 16 or tonumber(digits) >= MAX_COUNTER then
    return nil, not_a_lock(1, "a Redisson count-down latch's name holds its decimal count")
  end
  return tonumber(value)
end
