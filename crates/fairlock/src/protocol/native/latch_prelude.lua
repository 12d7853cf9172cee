-- fairlock prelude of the native count-down latch scripts, after common.lua.
--
-- KEYS[1] 'fairlock:{NAME}:latch', a hash of exactly three fields:
--   count   the count, a decimal integer from 1 (the latch is deleted when
--           it reaches 0: an absent latch is an open one),
--   expiry  the ms the keys live after the latch's last set or count-down,
--   round   an id of this setting of the latch (a try_set_count), which
--           the opening message carries.
-- KEYS[2] 'fairlock:{NAME}:latch:parties', a set of the party ids that
--   counted down (count_down_as), at most the count it was set with; it
--   lives and dies with KEYS[1].
-- KEYS[3] the channel 'fairlock:{NAME}:latch:open': the round of a latch
--   that reached 0 (or was deleted) is published there, once.

-- The latch: (count, expiry, round), false when absent, or (nil, error
-- reply) for a key of another type or data that is not a latch's. Runs
-- before any write.
local function read_latch()
  local bad = wrong_type(KEYS[1], 'hash') or wrong_type(KEYS[2], 'set')
  if bad then
    return nil, bad
  end
  if redis.call('exists', KEYS[1]) == 0 then
    return false
  end
  local fields = redis.call('hmget', KEYS[1], 'count', 'expiry', 'round')
  local count, expiry, round = counter(fields[1]), counter(fields[2]), fields[3]
  if redis.call('hlen', KEYS[1]) ~= 3 or not count or count < 1 or not expiry or expiry < 1
    or not round or not string.find(round, '^%x+$') or #round > 64 then
    return nil, not_a_lock(1, "a native latch's hash holds count, expiry and round only")
  end
  return count, expiry, round
end
