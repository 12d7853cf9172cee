-- fairlock native weighted engine prelude: a fair line of weighted requests
-- in front of a capacity. Prepended after common.lua and line.lua (the
-- line's helpers, shared with the lock: the line is the lock's layout
-- version 2, only what is granted differs), and followed by the object's
-- own prelude, which says what fits (rw_prelude.lua: the read-write lock;
-- sem_prelude.lua: the semaphore).
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
--   KEYS[2] line, KEYS[3] waiters: as the lock's (see line.lua); a
--           waiter's record is 'DEADLINE:LEASE:TTL:NONCE:WEIGHT:LABEL'
--           (WEIGHT: the permits a semaphore's request asks for, 1 for a
--           read-write lock's)
--   KEYS[4] meta hash: the last fencing token ('token'); the object's
--           prelude may keep more (the semaphore: its capacity and weights)
--   'fairlock:{NAME}:KIND:hold:ID' one hash per holder: owner = ID, count,
--           token, claimed (0 while a grant waits for its waiter's claim),
--           nonce (the acquisition's secret), partial (1 once partly
--           released), label (its client's, for inspect); a semaphore's
--           hold also its weight. Its TTL is the holder's lease. Built
--           here from KEYS[1], in its slot.
--
-- Invariants kept by every script:
--   1. Every hold key has its id in the holders set, and the set's TTL is
--      at least every hold key's (grants, claims, re-entries and renewals
--      extend both). An id leaves the set only with its key.
--   2. What is held fits: the object's own rule (kind.fits) held for every
--      grant when it was made.
--   3. After every script, the first live waiter does not fit (or nobody
--      waits): admit() grants the line's head while it fits.

-- How long the meta hash outlives the last use of the object (the release
-- result caches live as long). Its token never falls below the server
-- clock, so tokens keep increasing after it expired.
local META_GRACE_MS = 20000

-- At most this many holders whose score passed are checked per call
-- (bounded work; each dead holder is dropped once, a live one rescored
-- once per lease). As text: the ZRANGE argument.
local RECLAIM_LIMIT = '64'

-- The last fencing token (meta's 'token'), read and checked by read_meta()
-- before a script's first write; next_token() uses (and updates) it.
local meta

-- Read meta's token, once per script, before its first write: a value that
-- is not a counter (see counter()) is refused with NOTALOCK, and nothing is
-- written. Returns the error reply, or false.
local function read_meta()
  local text = redis.call('hget', KEYS[4], 'token')
  local token = counter(text)
  if text and not token then
    return not_a_lock(4, 'meta field token is not a decimal integer below 2^53')
  end
  -- No next token below 2^53 (a counter): refused as the data it must be
  -- (server microseconds reach it in the year 2255), not drawn from.
  if token and token >= MAX_COUNTER - 1 then
    return not_a_lock(4, 'meta field token leaves no next one below 2^53')
  end
  meta = {token = token or 0}
  return false
end

-- The next fencing token: above the last one and not below the server
-- clock in microseconds (so tokens keep increasing after meta expired, or
-- after a failover to a replica that missed the last grants, as long as
-- the clock does not step back). read_meta() must have run. Returns the
-- token and its text (decimal).
local function next_token(now_us)
  local value = math.max(meta.token + 1, now_us)
  local text = decimal(value)
  meta.token = value
  redis.call('hset', KEYS[4], 'token', text)
  return value, text
end

-- Make `key` live at least `ms` longer (never shortens a TTL; a key without
-- one gets it). Every key of the object thus expires once nobody uses it.
-- `text`: `ms` as text when the caller has it (an argument), else nil.
local function keep(key, ms, text)
  local left = redis.call('pttl', key)
  if left ~= -2 and left < ms then
    redis.call('pexpire', key, text or decimal(ms))
  end
end

-- A hold key's fields (HGETALL, without a semaphore's weight) as {owner,
-- token, count, nonce, partial, claimed, label}, or nil and NOTALOCK when
-- they are not a hold's: every field one of owner/count/token/claimed/
-- nonce/partial/label; owner, count (>= 1) and token present, count and
-- token counters, claimed 0 or 1, partial 1. An empty list: no hold ({}).
local HOLD_FIELDS = {owner = true, count = true, token = true, claimed = true, nonce = true, partial = true,
  label = true}
local function hold_fields(fields)
  local hold = {}
  if #fields > 14 then
    return nil, not_a_lock(1, 'the hold has more fields than a hold has')
  end
  for i = 1, #fields, 2 do
    if not HOLD_FIELDS[fields[i]] then
      return nil, not_a_lock(1, 'field ' .. fields[i] .. ' is not a hold field')
    end
    hold[fields[i]] = fields[i + 1]
  end
  if #fields == 0 then
    return hold
  end
  if not hold.owner or not counter(hold.token) or (counter(hold.count) or 0) < 1
      or (hold.claimed and hold.claimed ~= '0' and hold.claimed ~= '1')
      or (hold.partial and hold.partial ~= '1') then
    return nil, not_a_lock(1, 'the hold fields are malformed (owner, count and token must be set, as counters)')
  end
  return hold
end

-- Take `id` out of the line (its place and its record); 1 if it was in line.
local function leave(id)
  if redis.call('zrem', KEYS[2], id) == 0 then
    return 0
  end
  redis.call('hdel', KEYS[3], id)
  return 1
end

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
  local hold, bad = hold_fields(fields)
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

-- The types of the object's four keys (`meta_read_next`: meta's is then
-- the read that follows, read_meta()'s HGET, which fails on another type
-- before anything is written).
local function weighted_check_types(meta_read_next)
  return wrong_type(KEYS[1], 'zset') or wrong_type(KEYS[2], 'zset') or wrong_type(KEYS[3], 'hash')
    or (not meta_read_next and wrong_type(KEYS[4], 'hash'))
end

-- A waiter's record (record_of's, see line.lua) as the engine reads it:
-- its label field is 'WEIGHT:LABEL'. Returns the weight (nil when the
-- record names none, or a weight below 1, which no request has: a record
-- written by another program, as good as lost) and the label.
local function weight_of(record)
  local weight, label = string.match(record.label, '^(%d*):(.*)$')
  if not weight then
    return nil, record.label
  end
  weight = counter(weight)
  if weight and weight < 1 then
    weight = nil
  end
  return weight, label
end

-- A waiter's record as text.
local function waiter_record(now, lease_text, ttl_text, waiter_ttl, nonce, weight_text, label)
  return decimal(now + waiter_ttl) .. ':' .. lease_text .. ':' .. ttl_text .. ':' .. nonce .. ':' .. weight_text
    .. ':' .. label
end

-- Join the line at its end (arrival: above the last one's, and not below
-- the server clock in µs) or refresh the place of `id` (`rank`: its ZRANK,
-- nil when not in line; `record`: its record, record_of's), writing its
-- record unless it is fresh: written less than a quarter of its waiter
-- ttl ago by this acquisition (same secret, lease, weight and label). The
-- waiter calls at least every third of its waiter ttl, so it never lapses
-- while it lives. Keeps the line's keys and meta. Returns its rank.
local function wait_in_line(id, rank, record, now, now_us, lease_text, ttl_text, nonce, weight_text, label)
  local waiter_ttl = tonumber(ttl_text)
  local fresh = false
  if rank and record and record.nonce == nonce and record.lease == tonumber(lease_text)
      and record.deadline - now > waiter_ttl - math.floor(waiter_ttl / 4) then
    local weight, had = weight_of(record)
    fresh = weight and decimal(weight) == weight_text and had == label
  end
  if fresh then
    return rank
  end
  if not rank then
    local tail = redis.call('zrange', KEYS[2], '-1', '-1', 'withscores')
    redis.call('zadd', KEYS[2], decimal(math.max(tonumber(tail[2] or '0') + 1, now_us)), id)
    rank = redis.call('zcard', KEYS[2]) - 1
  end
  redis.call('hset', KEYS[3], id, waiter_record(now, lease_text, ttl_text, waiter_ttl, nonce, weight_text, label))
  keep_line(waiter_ttl, ttl_text)
  keep(KEYS[4], waiter_ttl + META_GRACE_MS)
  return rank
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

-- Make way for a grant to `id`, whose hold key is gone, at server ms
-- `now`: an entry it still has in the holders set (a grant it did not
-- claim in time, a lease that ended, a key evicted) still counts its old
-- hold. Due (its score passed), the entry is reclaimed here, its weight
-- given back, as reclaim() would have (which looks at RECLAIM_LIMIT due
-- entries per call, the soonest first: others may have kept it from this
-- one). Not due, it counts until then (its holder may believe in it), and
-- `id` is not granted before: a grant would write over the entry, and the
-- one release after it would give one of the two weights back, the other
-- lost for as long as anybody holds. Returns whether `id` may be granted.
local function make_way(id, now)
  local score = redis.call('zscore', KEYS[1], id)
  if not score then
    return true
  end
  if tonumber(score) > now then
    return false
  end
  redis.call('zrem', KEYS[1], id)
  kind.removed(id)
  return true
end

-- Make `id` a holder of `weight` under a new fencing token for
-- `expire_ms` (`expire_text` as text). `claimed`: '1' when the caller takes
-- it, '0' for a grant its waiter has not acted on; `nonce`: the
-- acquisition's secret; `label`: its client's. Returns the token and its
-- text.
local function grant(id, expire_ms, expire_text, now, now_us, claimed, nonce, weight, label)
  local token, text = next_token(now_us)
  local key = hold_key(id)
  if kind.weighted then
    redis.call('hset', key, 'owner', id, 'count', '1', 'token', text, 'claimed', claimed, 'nonce', nonce,
      'label', label, 'weight', decimal(weight))
  else
    redis.call('hset', key, 'owner', id, 'count', '1', 'token', text, 'claimed', claimed, 'nonce', nonce,
      'label', label)
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
-- lowered beneath its request). Dead waiters reaching the head are dropped
-- on the way (first_live). Returns how many were granted.
local function admit(channel_prefix, now, now_us)
  local granted = 0
  while true do
    local head, _, record = first_live(now)
    if not head then
      break
    end
    local lease, ttl, nonce = record.lease, record.ttl, record.nonce
    local weight, label = weight_of(record)
    if kind.weighted and not weight then
      -- A semaphore's request whose record names no weight of at least 1
      -- (written over by another program): what it asked for is unknown,
      -- and a guess below it would let it believe it holds permits nobody
      -- counts. It waits at the head until its next attempt writes its
      -- record again (sem_acquire.lua).
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
      if present == 0 and not make_way(head, now) then
        -- Its old entry in the holders set still counts (see make_way): it
        -- keeps its place, and nobody passes it, until that entry is due
        -- (at most the lease it was granted).
        break
      end
      leave_line(head)
      if present == 0 then
        local expire = math.max(1, math.min(lease, ttl))
        local expire_text = decimal(expire)
        local _, token = grant(head, expire, expire_text, now, now_us, '0', nonce, weight, label)
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

-- After a hold ended: admit who fits (dropping the dead at the head), and
-- when nobody holds or waits let the keys go (meta after its grace).
local function after_release(channel_prefix)
  local now, now_us = server_now()
  reclaim(now)
  admit(channel_prefix, now, now_us)
  if redis.call('zcard', KEYS[1]) == 0 then
    redis.call('del', KEYS[1])
    if redis.call('exists', KEYS[2]) == 0 then
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
