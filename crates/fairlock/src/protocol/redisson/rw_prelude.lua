-- fairlock prelude of the redisson read-write lock scripts (Redisson's
-- RReadWriteLock), prepended after common.lua; also of renew.lua, which
-- renews read holds' timeout keys with its helpers.
--
-- The lock is one hash under the name itself: field 'mode' ('read' or
-- 'write'), one field per reading owner ('CLIENT:THREAD' -> its read hold
-- count) and one per writing owner ('CLIENT:THREAD:write' -> its write hold
-- count; only one writer at a time, and only the writer may read beside
-- it). Each read hold N of an owner has its own string key
-- '{NAME}:OWNER:rwlock_timeout:N' with that hold's lease, so that a reader
-- that crashed stops counting once its keys expired.

-- The most read holds a Redisson read-write lock may count, all its owners
-- together. Each hold has a timeout key, and a read release (and a read
-- hold's renewal) visits them one by one: a count far beyond any real one
-- (application data, a hostile HSET) must not make a script loop for ages
-- after its first write, where SCRIPT KILL can no longer stop it. 100 000
-- PTTLs take about 0.1 s. A lock that claims more is not a lock (NOTALOCK);
-- a reader that would go beyond it finds the lock busy.
local MAX_READ_HOLDS = 100000

-- The prefix of every timeout key of lock `key`: '{NAME}', or the name as it
-- is when it already holds a '{' (its own hash tag then decides the slot).
local function timeout_prefix(key)
  if string.find(key, '{', 1, true) then
    return key
  end
  return '{' .. key .. '}'
end

-- The timeout key of read hold `n` of `owner`.
local function timeout_key(prefix, owner, n)
  return prefix .. ':' .. owner .. ':rwlock_timeout:' .. n
end

-- A write field ('OWNER:write')?
local function is_writer(field)
  return string.sub(field, -6) == ':write'
end

-- The lock's state from one HGETALL (a read: a key of another type fails
-- here, before anything is written): {mode = 'read'|'write'|nil, counts =
-- field -> count, holders = number of owner fields, reads = the read holds
-- of all owners}. Anything that is not
-- a read-write lock as Redisson writes it (a plain lock's hash, application
-- data, counts that are not positive integers, a lock without a TTL) is
-- refused as the second value (NOTALOCK), before any write.
local function rw_state(key)
  local fields = redis.call('hgetall', key)
  local state = {counts = {}, holders = 0, reads = 0}
  if #fields == 0 then
    return state
  end
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == 'mode' then
      if value ~= 'read' and value ~= 'write' then
        return nil, not_a_lock(1, "a read-write lock's mode is read or write")
      end
      state.mode = value
    else
      local count = counter(value)
      if not count or count < 1 or not (string.find(field, ':%d+$') or string.find(field, ':%d+:write$')) then
        return nil, not_a_lock(1, 'a Redisson read-write lock hash has a mode and fields OWNER:THREAD'
          .. ' or OWNER:THREAD:write with positive integer counts')
      end
      state.counts[field] = count
      state.holders = state.holders + 1
      if not is_writer(field) then
        state.reads = state.reads + count
      end
    end
  end
  if state.reads > MAX_READ_HOLDS then
    return nil, not_a_lock(1, 'a Redisson read-write lock counts at most ' .. MAX_READ_HOLDS .. ' read holds')
  end
  if not state.mode then
    return nil, not_a_lock(1, 'a Redisson read-write lock hash has a mode field')
  end
  if redis.call('pttl', key) == -1 then
    return nil, not_a_lock(1, 'a Redisson read-write lock always has a TTL')
  end
  return state
end

-- The reply of an acquisition that holds `count` holds now.
local function granted(count)
  if count == 1 then
    return {1, 1}
  end
  return {2, count}
end

-- The start of both acquires: the lock's state (or NOTALOCK, returned as
-- the reply), and the lost-reply check: `owner` (a reader, or the writer
-- 'OWNER:write') holding one more than `base`, the count it had before
-- this acquisition, means an earlier attempt of this acquisition took it
-- and its reply was lost: answered as taken, not counted again. Returns
-- (reply) when the script is done, else (nil, state).
local function acquire_start(owner, base, labels, label, lease)
  local state, bad = rw_state(KEYS[1])
  if bad then
    return bad
  end
  local held = state.counts[owner]
  if held and held == tonumber(base) + 1 then
    write_label(labels, owner, label, lease)
    return granted(held)
  end
  return nil, state
end

-- The start of both releases: a retried request's cached answer, the
-- lock's state (or NOTALOCK), -2 when nobody holds it. Returns (reply)
-- when the script is done, else (nil, state).
local function release_start(cache)
  local cached = redis.call('get', cache)
  if cached then
    return tonumber(cached)
  end
  local state, bad = rw_state(KEYS[1])
  if bad then
    return bad
  end
  if not state.mode then
    return -2
  end
  return nil, state
end
