-- fairlock common prelude, prepended to every script.

-- Refuse, before any write, to touch a key that holds another Redis type.
local function wrong_type(key, expected)
  local actual = redis.call('type', key)['ok']
  if actual ~= 'none' and actual ~= expected then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. actual .. ', expected a ' .. expected)
  end
  return false
end

-- Refuse, before any write, data that is not a lock's (application data
-- under the lock's name, malformed counters): the error code NOTALOCK, then
-- the index in KEYS of the key that holds it, then why. The client maps the
-- code to Error::NotALock.
local function not_a_lock(index, reason)
  return redis.error_reply('NOTALOCK ' .. index .. ' ' .. reason)
end

-- A counter as the scripts write it: a decimal integer below 2^53 (Lua
-- numbers are doubles: above that, +1 is lost, and 1e19, inf or nan would
-- turn into nonsense replies and PEXPIREs). Its value, or nil for anything
-- else.
local MAX_COUNTER = 9007199254740992
local function counter(text)
  if type(text) == 'string' and #text <= 16 and string.find(text, '^%d+$') then
    local n = tonumber(text)
    if n < MAX_COUNTER then
      return n
    end
  end
  return nil
end
