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

-- fairlock's client labels (who holds or waits, for `inspect`): a hash of
-- client id -> label next to the lock, in its slot. Best effort and apart
-- from the lock: a key of another type, or a command an ACL refuses, is
-- skipped (pcall), never an error of the lock's script; no lock decision
-- reads it.
-- At most MAX_LABELS clients: a new one beyond them empties the hash first
-- (the live clients write theirs again at their next attempt or renewal).
local MAX_LABELS = 256
-- Write `owner`'s client label (the owner id without its last ':N') to
-- `key` and keep the key at least `ms` longer, as long as the lock key or
-- the place in line the caller just set. No key or an empty label: nothing.
local function write_label(key, owner, label, ms)
  if not key or not label or label == '' then
    return
  end
  -- A read-write lock's writer 'CLIENT:THREAD:write' is CLIENT's too.
  local client = string.match((string.gsub(owner, ':write$', '')), '^(.*):[^:]*$')
  if not client then
    return
  end
  local added = redis.pcall('hset', key, client, label)
  if type(added) ~= 'number' then
    return
  end
  local count = added == 1 and redis.pcall('hlen', key)
  if type(count) == 'number' and count > MAX_LABELS then
    redis.call('del', key)
    redis.call('hset', key, client, label)
  end
  local left = redis.call('pttl', key)
  if left < tonumber(ms) then
    redis.call('pexpire', key, ms)
  end
end
