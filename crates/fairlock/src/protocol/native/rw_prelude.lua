-- fairlock native read-write lock prelude, prepended after common.lua and
-- the native prelude (whose queue helpers it reuses: the line is the
-- lock's, only what is granted differs).
--
-- Keys of read-write lock NAME, all 'fairlock:{NAME}:rw:...' (one slot):
--   KEYS[1] holders: sorted set, holder id -> the server ms at which its
--           lease was last known to end. A renewal extends the hold's own
--           key and not this score, so the score is a lower bound: an entry
--           whose score passed is checked against its key (reclaim).
--   KEYS[2] queue, KEYS[3] liveness, KEYS[4] meta, KEYS[5] waiter records:
--           as the lock's (see the native prelude), but for read-write
--           requests
--   'fairlock:{NAME}:rw:hold:ID' one hash per holder with the lock hash's
--           fields (owner = ID, count, token, claimed, nonce, partial); its
--           TTL is the holder's lease. Built here from KEYS[1], in its slot.
-- A holder id (and a waiter's) is the owner id for the read side and
-- 'OWNER:write' for the write side: an owner's read and write holds are
-- two holds, and a writer that also reads (a downgrade) is one party.
--
-- Invariants kept by every script:
--   1. Every hold key has its id in the holders set, and the set's TTL is
--      at least every hold key's (grants, claims, re-entries and renewals
--      extend both). An id leaves the set only with its key.
--   2. Nobody but the writer's own read hold is held beside a write hold.
--   3. After every script, the first live waiter does not fit (or nobody
--      waits): admit() grants the line's head while it fits.

-- At most this many holders whose score passed are checked per call
-- (bounded work; each dead holder is dropped once, a live one rescored
-- once per lease).
local RECLAIM_LIMIT = 64

-- The prefix of every hold key: 'fairlock:{NAME}:rw:hold:'.
local HOLD_PREFIX = string.sub(KEYS[1], 1, -8) .. 'hold:'

local function hold_key(id)
  return HOLD_PREFIX .. id
end

-- A write-side id ('OWNER:write')?
local function is_write(id)
  return string.sub(id, -6) == ':write'
end

-- The hold of `id` as the lock hash's fields ({} when it holds nothing), or
-- nil and NOTALOCK when its key holds anything but this lock's hold of
-- `id` (a read: nothing has been written when it fails).
local function hold_of(id)
  local fields = redis.pcall('hgetall', hold_key(id))
  if fields.err then
    return nil, not_a_lock(1, 'the hold key of ' .. id .. ' is not a hash')
  end
  local hold, bad = lock_of(fields)
  if bad then
    return nil, bad
  end
  if hold.owner and hold.owner ~= id then
    return nil, not_a_lock(1, 'the hold key of ' .. id .. ' names another holder')
  end
  return hold
end

-- Whether the holders set names `id`. A hold key whose id it does not name
-- is no hold (invariant 1 broken under it: the set evicted under
-- maxmemory, or deleted): a writer may have been admitted since, so it is
-- neither re-entered nor claimed, and its holder's renewal finds it gone
-- (renew.lua).
local function registered(id)
  return redis.call('zscore', KEYS[1], id) ~= false
end

local function rw_check_types()
  return wrong_type(KEYS[1], 'zset') or wrong_type(KEYS[2], 'zset') or wrong_type(KEYS[3], 'zset')
    or wrong_type(KEYS[4], 'hash') or wrong_type(KEYS[5], 'hash')
end

-- Holders whose score passed: gone ones leave the set, live ones (renewed
-- since) get the end of their key's TTL as their score.
local function reclaim(now)
  local due = redis.call('zrange', KEYS[1], '-inf', now, 'byscore', 'limit', 0, RECLAIM_LIMIT)
  for _, id in ipairs(due) do
    local left = redis.call('pttl', hold_key(id))
    if left == -2 then
      redis.call('zrem', KEYS[1], id)
    elseif left == -1 then
      -- No TTL: not a key these scripts wrote. It counts as a holder (the
      -- safe side) and is looked at again in a minute.
      redis.call('zadd', KEYS[1], now + 60000, id)
    else
      redis.call('zadd', KEYS[1], now + left, id)
    end
  end
end

-- How many hold, and the writer's id (nil when nobody writes). A writer
-- holds with at most its own read hold beside it (invariant 2), so only a
-- set of one or two can name one.
local function holders_state()
  local n = redis.call('zcard', KEYS[1])
  local writer
  if n > 0 and n <= 2 then
    for _, id in ipairs(redis.call('zrange', KEYS[1], 0, -1)) do
      if is_write(id) then
        writer = id
      end
    end
  end
  return n, writer
end

-- Whether a request of `id` fits beside the holders: a writer only when
-- nobody holds; a reader when nobody writes, or the writer is its own
-- owner (a downgrade).
local function fits(id, n, writer)
  if is_write(id) then
    return n == 0
  end
  return writer == nil or writer == id .. ':write'
end

-- Make `id` a holder under a new fencing token for `expire_ms`. `claimed`:
-- 1 when the caller takes it, 0 for a grant its waiter has not acted on;
-- `nonce`: the acquisition's secret.
local function grant(id, expire_ms, now, now_us, claimed, nonce)
  local token = next_counter('token', now_us)
  local key = hold_key(id)
  redis.call('hset', key, 'owner', id, 'count', 1, 'token', decimal(token), 'claimed', claimed,
    'nonce', nonce)
  redis.call('pexpire', key, expire_ms)
  redis.call('zadd', KEYS[1], now + expire_ms, id)
  keep(KEYS[1], expire_ms)
  keep(KEYS[4], expire_ms + META_GRACE_MS)
  return token
end

-- Grant the first live waiters while each fits, in line order: readers
-- queued together behind a writer go together, a writer alone, and nobody
-- passes a head that does not fit. Each is told on its channel with a
-- grant message signed with its secret (see hand_off in the native
-- prelude) and holds for min(its lease, its waiter ttl) until it claims.
-- A waiter whose hold key holds something else is dropped from the line
-- ungranted (its next attempt gets NOTALOCK). Returns how many were granted.
local function admit(channel_prefix, default_ttl, now, now_us)
  local n, writer = holders_state()
  local granted = 0
  while true do
    local head = first_live(now)
    if not head or not fits(head, n, writer) then
      break
    end
    local lease, ttl, nonce = waiter_record(head, default_ttl)
    leave_queue(head)
    if redis.call('exists', hold_key(head)) == 0 then
      local expire = math.max(1, math.min(lease, ttl))
      local token = grant(head, expire, now, now_us, 0, nonce)
      local message = 'grant:' .. decimal(token) .. ':' .. decimal(now) .. ':' .. decimal(expire)
      redis.call('publish', channel_prefix .. ':' .. head,
        message .. ':' .. redis.sha1hex(nonce .. ':' .. message))
      granted = granted + 1
      n = n + 1
      if is_write(head) then
        writer = head
      end
    end
  end
  return granted
end

-- After a hold ended: drop the dead, admit who fits, and when nobody holds
-- or waits let the keys go (meta after its grace).
local function after_release(channel_prefix, default_ttl)
  local now, now_us = server_now()
  purge_dead(now)
  reclaim(now)
  admit(channel_prefix, default_ttl, now, now_us)
  if redis.call('zcard', KEYS[1]) == 0 then
    redis.call('del', KEYS[1])
    if not anybody_waits() then
      redis.call('pexpire', KEYS[4], META_GRACE_MS)
    end
  end
end

-- Remove `id`'s hold (its key and its entry).
local function drop_hold(id)
  redis.call('del', hold_key(id))
  redis.call('zrem', KEYS[1], id)
end

-- Tell the client of holder `id` that its hold was taken away (see revoke
-- in the native prelude): the message names KEYS[1], the key both sides'
-- holds are registered under.
local function revoke_holder(revoked_prefix, id)
  local owner = string.gsub(id, ':write$', '')
  local client = string.match(owner, '^(.*):[^:]*$')
  if client then
    redis.call('publish', revoked_prefix .. client, KEYS[1])
  end
end
