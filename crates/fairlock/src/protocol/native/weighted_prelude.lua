-- fairlock native weighted engine prelude: a fair line of weighted requests
-- in front of a capacity. Prepended after common.lua and the native prelude
-- (whose queue helpers it reuses: the line is the lock's, only what is
-- granted differs), and followed by the object's own prelude, which says
-- what fits (rw_prelude.lua: the read-write lock; sem_prelude.lua: the
-- semaphore).
--
-- Keys of object NAME, all 'fairlock:{NAME}:KIND:...' (KIND 'rw' or 'sem';
-- one slot):
--   KEYS[1] holders: sorted set, holder id -> the server ms at which its
--           lease was last known to end. Every script that extends a hold's
--           key moves its score with it (GT; renew.lua too), so a live
--           holder is not due: the score never passes while the key lives
--           (but by a script's run), and an entry whose score passed is
--           checked against its key (reclaim), which keeps a score left
--           behind (an older fairlock's renewals did not move it) safe.
--   KEYS[2] queue, KEYS[3] liveness, KEYS[4] meta, KEYS[5] waiter records:
--           as the lock's (see the native prelude); the object's prelude
--           may keep more in meta (the semaphore: its capacity and weights)
--   'fairlock:{NAME}:KIND:hold:ID' one hash per holder with the lock hash's
--           fields (owner = ID, count, token, claimed, nonce, partial; a
--           semaphore's hold also its weight); its TTL is the holder's
--           lease. Built here from KEYS[1], in its slot.
--
-- Invariants kept by every script:
--   1. Every hold key has its id in the holders set, and the set's TTL is
--      at least every hold key's (grants, claims, re-entries and renewals
--      extend both). An id leaves the set only with its key.
--   2. What is held fits: the object's own rule (kind.fits) held for every
--      grant when it was made.
--   3. After every script, the first live waiter does not fit (or nobody
--      waits): admit() grants the line's head while it fits.

-- At most this many holders whose score passed are checked per call
-- (bounded work; each dead holder is dropped once, a live one rescored
-- once per lease). As text: the ZRANGE argument.
local RECLAIM_LIMIT = '64'

-- What the object's prelude fills in (it comes after this one; these are
-- called, never read, before it ran):
--   kind.fits(id, weight)   whether a request of `id` weighing `weight`
--                           fits beside the holders now
--   kind.never_fits(weight) whether it can never fit (a semaphore's
--                           request above its capacity)
--   kind.added(id, weight)  a hold of `id` was just granted
--   kind.removed(id, weight) the hold of `id` ended (released, reclaimed);
--                           `weight`: its key's (hold_of), nil when its
--                           key is gone; returns the weight given back
--   kind.weighted           hold keys carry a 'weight' field
local kind = {}

-- The prefix of every hold key: 'fairlock:{NAME}:KIND:hold:'.
local HOLD_PREFIX = string.sub(KEYS[1], 1, -8) .. 'hold:'

local function hold_key(id)
  return HOLD_PREFIX .. id
end

-- The hold of `id` as the lock hash's fields ({} when it holds nothing;
-- a semaphore's also `weight`, a number), or nil and NOTALOCK when its key
-- holds anything but this object's hold of `id` (a read: nothing has been
-- written when it fails).
local function hold_of(id)
  local fields = redis.pcall('hgetall', hold_key(id))
  if fields.err then
    if string.find(fields.err, 'WRONGTYPE', 1, true) then
      return nil, not_a_lock(1, 'the hold key of ' .. id .. ' is not a hash')
    end
    -- Any other error: the key cannot be read on this node (in a Cluster
    -- slot migrating away, a key already moved is refused to a script
    -- rather than read as absent).
    return nil, redis.error_reply('TRYAGAIN the hold key of ' .. id .. ' is not on this node: ' .. fields.err)
  end
  local weight
  if kind.weighted then
    local rest = {}
    for i = 1, #fields, 2 do
      if fields[i] == 'weight' then
        weight = counter(fields[i + 1])
        if not weight or weight < 1 then
          return nil, not_a_lock(1, 'the hold key of ' .. id .. ' has a malformed weight')
        end
      else
        rest[#rest + 1] = fields[i]
        rest[#rest + 1] = fields[i + 1]
      end
    end
    if #rest > 0 and not weight then
      return nil, not_a_lock(1, 'the hold key of ' .. id .. ' has no weight')
    end
    fields = rest
  end
  local hold, bad = lock_of(fields)
  if bad then
    return nil, bad
  end
  if hold.owner and hold.owner ~= id then
    return nil, not_a_lock(1, 'the hold key of ' .. id .. ' names another holder')
  end
  hold.weight = weight
  return hold
end

-- Whether the holders set names `id`. A hold key whose id it does not name
-- is no hold (invariant 1 broken under it: the set evicted under
-- maxmemory, or deleted): others may have been admitted since, so it is
-- neither re-entered nor claimed, and its holder's renewal finds it gone
-- (renew.lua).
local function registered(id)
  return redis.call('zscore', KEYS[1], id) ~= false
end

-- Set by the acquire scripts from their caller: true on a Redis Cluster,
-- where a slot migration half-way may leave a hold key on the other node.
-- Elsewhere an absent hold key is gone (deleted, evicted), whatever its
-- score says.
local slots_move = false

-- On a Cluster (slots_move), a TRYAGAIN error reply when the holders set says the lease of `id` has
-- not ended but its hold key (`held`, from hold_of) is not on this node:
-- half-way through a Cluster slot migration that moved the declared keys
-- before it (or after: scripts then run on the other node), the key is on
-- the other node. Taking it for gone would lose a live hold: a re-entry
-- granted afresh would write a second hold key beside the one on its way
-- (which then cannot land: BUSYKEY). The caller retries until the
-- migration completed. (A release needs no such check: it declares its
-- result key, new with every request, so Redis itself answers TRYAGAIN
-- while the slot is split.) Elsewhere (an evicted or deleted key) it
-- lasts until the score passes: at most one lease, as the score never
-- outlives the key's TTL by more than a script's run. False otherwise.
local function elsewhere(id, held)
  if held.owner or not slots_move then
    return false
  end
  local score = redis.call('zscore', KEYS[1], id)
  if score and tonumber(score) > server_now() then
    return redis.error_reply('TRYAGAIN the hold key of ' .. id .. ' is not on this node (a slot migration?)')
  end
  return false
end

-- The hold of an acquisition's own `id`, read before any write: as
-- hold_of, except that a hold key the holders set does not name (lost, see
-- registered) is no hold: {} and `orphan` true, for the caller to delete
-- once every read is done and to go on as a fresh acquisition; and that a
-- hold whose key is on another node (see elsewhere) is a TRYAGAIN error.
-- Returns (hold, nil, orphan), or (nil, NOTALOCK or TRYAGAIN).
local function own_hold(id)
  local held, bad = hold_of(id)
  if bad then
    return nil, bad
  end
  local moved = elsewhere(id, held)
  if moved then
    return nil, moved
  end
  if held.owner and not registered(id) then
    return {}, nil, true
  end
  return held, nil, false
end

-- The types of the object's five keys (`meta_read_next` as for
-- check_types in the lock's lock_prelude.lua: meta's is then its HMGET's).
local function weighted_check_types(meta_read_next)
  return wrong_type(KEYS[1], 'zset') or wrong_type(KEYS[2], 'zset') or wrong_type(KEYS[3], 'zset')
    or (not meta_read_next and wrong_type(KEYS[4], 'hash')) or wrong_type(KEYS[5], 'hash')
end

-- A queued waiter's record: the lock's 'LEASE:TTL:NONCE' (see waiter_record
-- in lock_prelude.lua), with ':wWEIGHT' appended for a semaphore's
-- request. Returns lease, ttl, nonce and the weight (nil when the record
-- names none, or a weight below 1, which no request has: a record written
-- by another program, as good as lost).
local function waiter_of(id, default_ttl)
  local record = redis.call('hget', KEYS[5], id) or ''
  local head, weight = string.match(record, '^(.*):w(%d+)$')
  if head then
    record = head
  end
  weight = counter(weight)
  if weight and weight < 1 then
    weight = nil
  end
  local lease, ttl, nonce = string.match(record, '^(%d+):(%d+):(.*)$')
  lease, ttl = counter(lease), counter(ttl)
  if not lease or not ttl then
    return counter(record) or default_ttl, default_ttl, '', weight
  end
  return lease, ttl, nonce, weight
end

-- Holders whose score passed: gone ones leave the set, live ones (renewed
-- since) get the end of their key's TTL as their score.
local function reclaim(now)
  local due = redis.call('zrange', KEYS[1], '-inf', decimal(now), 'byscore', 'limit', '0', RECLAIM_LIMIT)
  for _, id in ipairs(due) do
    local left = redis.pcall('pttl', hold_key(id))
    if type(left) ~= 'number' then
      -- Not readable here (a slot migration half-way, the key moved):
      -- still counted, looked at again by the next call.
    elseif left == -2 then
      redis.call('zrem', KEYS[1], id)
      kind.removed(id)
    elseif left == -1 then
      -- No TTL: not a key these scripts wrote. It counts as a holder (the
      -- safe side) and is looked at again in a minute.
      redis.call('zadd', KEYS[1], decimal(now + 60000), id)
    else
      redis.call('zadd', KEYS[1], decimal(now + left), id)
    end
  end
end

-- Make `id` a holder of `weight` under a new fencing token for
-- `expire_ms` (`expire_text` as text). `claimed`: '1' when the caller takes
-- it, '0' for a grant its waiter has not acted on; `nonce`: the
-- acquisition's secret. Returns the token and its text.
local function grant(id, expire_ms, expire_text, now, now_us, claimed, nonce, weight)
  local token, text = next_counter('token', now_us)
  local key = hold_key(id)
  redis.call('hset', key, 'owner', id, 'count', '1', 'token', text, 'claimed', claimed,
    'nonce', nonce)
  if kind.weighted then
    redis.call('hset', key, 'weight', decimal(weight))
  end
  redis.call('pexpire', key, expire_text)
  redis.call('zadd', KEYS[1], decimal(now + expire_ms), id)
  keep(KEYS[1], expire_ms, expire_text)
  keep(KEYS[4], expire_ms + META_GRACE_MS)
  kind.added(id, weight)
  return token, text
end

-- Grant the first live waiters while each fits, in line order (readers
-- queued together behind a writer go together, a semaphore's requests
-- while their permits are free), and nobody passes a head that does not
-- fit. Each is told on its channel with a grant message signed with its
-- secret (see hand_off in lock_prelude.lua) and holds for min(its lease,
-- its waiter ttl) until it claims. A waiter whose hold key holds something
-- else is dropped from the line ungranted (its next attempt gets
-- NOTALOCK); one whose record asks for more than the total keeps its
-- place, stops the line and is woken ('refused'): its next attempt writes
-- its record again, or gets the error and leaves the line (the total was
-- lowered beneath its request). Returns how many were granted.
local function admit(channel_prefix, default_ttl, now, now_us)
  local granted = 0
  while true do
    local head = first_live(now)
    if not head then
      break
    end
    local lease, ttl, nonce, weight = waiter_of(head, default_ttl)
    if kind.weighted and not weight then
      -- A semaphore's request whose record was lost (evicted, deleted) or
      -- names no weight of at least 1 (written over): what it asked for is
      -- unknown, and a guess below it would let it believe it holds
      -- permits nobody counts. It waits at the head until its next attempt
      -- writes its record again (sem_acquire.lua).
      break
    end
    weight = weight or 1
    if kind.never_fits(weight) then
      -- A request above the total: the total was lowered beneath it, or
      -- another program wrote over its record. Either way it keeps its
      -- place and nobody passes it; it is woken, and its own next attempt
      -- writes its record again (sem_acquire.lua) or, its own request
      -- above the total, leaves the line with the error.
      redis.call('publish', channel_prefix .. ':' .. head, 'refused')
      break
    elseif not kind.fits(head, weight) then
      break
    else
      local present = redis.pcall('exists', hold_key(head))
      if type(present) ~= 'number' then
        -- The head's hold key cannot be written on this node (a slot
        -- migration half-way: its slot is moving and the key is not here).
        -- It keeps its place; the first call after the migration admits it.
        break
      end
      leave_queue(head)
      if present == 0 then
        local expire = math.max(1, math.min(lease, ttl))
        local expire_text = decimal(expire)
        local _, token = grant(head, expire, expire_text, now, now_us, '0', nonce, weight)
        local message = 'grant:' .. token .. ':' .. decimal(now) .. ':' .. expire_text
        -- A semaphore's grant is signed over the weight granted too: its
        -- waiter trusts it only for the weight it asked for (a record
        -- another program wrote over is granted at the record's weight;
        -- the waiter's next attempt then corrects the hold, sem_acquire.lua).
        local key = nonce
        if kind.weighted then
          key = nonce .. ':w' .. decimal(weight)
        end
        redis.call('publish', channel_prefix .. ':' .. head,
          message .. ':' .. redis.sha1hex(key .. ':' .. message))
        granted = granted + 1
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

-- Remove `id`'s hold (its key and its entry). `weight`: the weight its key
-- records (hold_of's, read before any write), nil when the key is gone.
-- Returns the weight given back (0 for an object without weights).
local function drop_hold(id, weight)
  redis.call('del', hold_key(id))
  if redis.call('zrem', KEYS[1], id) == 1 then
    return kind.removed(id, weight) or 0
  end
  return 0
end
