-- fairlock native semaphore prelude, after the weighted engine's
-- (weighted_prelude.lua): a request of n permits weighs n and fits while
-- the holders' weights and it stay within the capacity.
--
-- The keys are 'fairlock:{NAME}:sem:...' (see weighted_prelude.lua). A
-- holder id is a fresh owner id per acquisition ('CLIENT:N'): one hold per
-- acquisition, count 1, never re-entered; its hold key records its
-- 'weight', and its queue record ends in ':wWEIGHT'.
-- Meta (KEYS[4]) keeps, beside the counters, 'capacity' (the permits in
-- all), 'used' (the sum of the holders' weights) and 'w:ID' per holder
-- (its weight, given back when it is reclaimed: its key is gone then). The
-- holders set may expire with the last hold keys while meta lives on (a
-- waiter keeps it): an absent set means nothing is held (sem_read).
-- Grants, claims and renewals keep meta at least as long as every hold
-- key, plus META_GRACE_MS: a semaphore nobody holds or waits for forgets
-- its capacity after that grace, and the next call's `permits` sets it.
--
-- Invariant 2 of the engine, for this object: used <= capacity, but for a
-- capacity lowered beneath what is held (then nothing is admitted until
-- enough comes back).

-- The state every decision reads: capacity (nil: unknown, nothing is
-- admitted), used, and whether meta stores them.
local sem = {used = 0}

-- The weight meta records for holder `id` ('w:ID'), or nil when it records
-- none, or something that is not a weight (not a counter, or below 1:
-- written by another program): a lost record.
local function meta_weight(id)
  local weight = counter(redis.call('hget', KEYS[4], 'w:' .. id))
  if weight and weight >= 1 then
    return weight
  end
  return nil
end

-- Count `used` again from the hold keys (meta lost it, or a holder's
-- weight): returns it, and keeps in sem.weights what each holder counts
-- for (what its release or reclaim gives back in this script) and in
-- sem.recounted the ids counted (sem_write stores their weights, 'w:ID',
-- with the `used` they add up to). `strict`, before any write: a hold key
-- that is not a hold is returned as the error (NOTALOCK, or TRYAGAIN when
-- it is not on this node); otherwise, in a script that wrote already, it
-- counts as a key not here.
local function count_holds(strict)
  local used = 0
  sem.weights = {}
  sem.recounted = {}
  local now
  local entries = redis.call('zrange', KEYS[1], '0', '-1', 'withscores')
  for i = 1, #entries, 2 do
    local id = entries[i]
    local hold, bad = hold_of(id)
    if bad then
      if strict then
        return nil, bad
      end
      hold = {}
    end
    local weight = hold.weight
    if not hold.owner then
      -- No key here while the set says its lease runs (evicted or deleted
      -- with meta; or on the other node half-way through a slot
      -- migration): its holder believes in it until then (renew.lua
      -- answers 'unsure'), so it counts, with the weight meta recorded or,
      -- that lost too, the whole capacity (nothing is admitted beside it
      -- before its lease ends; given back whole with it).
      now = now or server_now()
      if tonumber(entries[i + 1]) > now then
        weight = meta_weight(id) or sem.capacity
      else
        -- Its lease ended, and it waits for its reclaim (one call reclaims
        -- RECLAIM_LIMIT: a later one may): it counts until then with the
        -- weight meta records, which that reclaim gives back. Left out
        -- while meta kept its weight, it would be given back twice.
        weight = meta_weight(id)
      end
    end
    if weight then
      used = used + weight
      sem.weights[id] = weight
      sem.recounted[#sem.recounted + 1] = id
    end
  end
  return used
end

-- Read the capacity and `used`, before any write: NOTALOCK when they are
-- not counters. `permits`: the capacity of a semaphore without one (nil
-- when the script does not know it). A meta without `used` while holds
-- live (it was removed by hand, or evicted) counts their weights from
-- their keys.
local function sem_read(permits)
  local values = redis.call('hmget', KEYS[4], 'capacity', 'used')
  local capacity, used = counter(values[1]), counter(values[2])
  if (values[1] and not capacity) or (values[2] and not used) then
    return not_a_lock(4, 'meta fields capacity and used must be decimal integers below 2^53')
  end
  sem.stored = capacity ~= nil
  sem.capacity = capacity or permits
  if not used then
    local bad
    used, bad = count_holds(true)
    if bad then
      return bad
    end
  end
  if used > 0 and redis.call('exists', KEYS[1]) == 0 then
    -- The holders set expired with the last hold keys (it outlives each
    -- of them, invariant 1, and never loses an entry but in a script that
    -- gives its weight back): nothing is held, whatever meta still says.
    used = 0
    sem.stale = true
  end
  sem.used = used
  return false
end

-- Store the capacity (when known) and `used` in meta (and drop the
-- weights of holders that expired unseen, see sem_read).
local function sem_write()
  if sem.stale then
    local fields = redis.call('hgetall', KEYS[4])
    for i = 1, #fields, 2 do
      if string.sub(fields[i], 1, 2) == 'w:' then
        redis.call('hdel', KEYS[4], fields[i])
      end
    end
    sem.stale = false
  end
  if sem.capacity then
    local fresh = not sem.stored
    redis.call('hset', KEYS[4], 'capacity', decimal(sem.capacity), 'used', decimal(sem.used))
    sem.stored = true
    if fresh then
      -- A meta written anew (the first call, or meta lost while holds
      -- live) lives as long as the holders set, which outlives every hold
      -- key, plus the grace: the total is not forgotten while anybody
      -- holds (grants, claims and renewals extend it from then on).
      keep(KEYS[4], math.max(redis.call('pttl', KEYS[1]), 0) + META_GRACE_MS)
    end
    -- A `used` counted from the hold keys (meta lost while they live, or
    -- a holder's weight in it) is stored with the weights it counts: a
    -- counted holder whose key is gone by its reclaim (kind.removed, in a
    -- later script) gives back the weight meta records.
    if sem.recounted then
      for _, id in ipairs(sem.recounted) do
        if sem.weights[id] then
          redis.call('hset', KEYS[4], 'w:' .. id, decimal(sem.weights[id]))
        end
      end
      sem.recounted = nil
    end
  end
end

kind.weighted = true
kind.check = function()
  return sem_read(nil)
end
kind.fits = function(_, weight)
  return sem.capacity ~= nil and sem.used + weight <= sem.capacity
end
kind.never_fits = function(weight)
  return sem.capacity ~= nil and weight > sem.capacity
end
kind.added = function(id, weight)
  sem.used = sem.used + weight
  -- Stored after sem_write: its clean-up of stale meta (sem.stale) deletes
  -- every weight meta holds, and must not take this one with them (a
  -- give-up or a force-release admits without writing meta first).
  sem_write()
  redis.call('hset', KEYS[4], 'w:' .. id, decimal(weight))
end
-- `weight`: the hold's own, read from its key and checked (hold_of) before
-- any write; nil when its key is gone (a reclaim, or a force-release of a
-- hold whose key was lost). Returns the weight given back.
kind.removed = function(id, weight)
  if sem.weights then
    -- `used` was counted again by this script (count_holds): what it
    -- counted is what goes back (nothing for a holder it did not count).
    weight = sem.weights[id] or 0
    -- Given back once: sem_write must not store it again.
    sem.weights[id] = nil
  elseif not weight then
    weight = meta_weight(id)
    if not weight then
      -- Its key gone, and its weight in meta lost or written over (not a
      -- weight): what it added to `used` is unknown, so `used` is counted
      -- again from the hold keys, this one's no longer among them; what
      -- `used` loses is what it gave back.
      local before = sem.used
      redis.call('hdel', KEYS[4], 'w:' .. id)
      sem.used = count_holds(false)
      sem.weights[id] = nil
      sem_write()
      return math.max(0, before - sem.used)
    end
  end
  redis.call('hdel', KEYS[4], 'w:' .. id)
  sem.used = math.max(0, sem.used - weight)
  sem_write()
  return weight
end
