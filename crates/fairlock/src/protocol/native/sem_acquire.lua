-- Native semaphore: take `weight` permits at once, claim a grant made
-- while waiting, or wait in line (and keep the place alive, as the lock's
-- waiters do).
-- KEYS[1..5] see weighted_prelude.lua, KEYS[6] (optional) the labels
-- ARGV[1] holder id (a fresh owner per acquisition), ARGV[2] lease ms,
-- ARGV[3] waiter ttl ms, ARGV[4] channel prefix, ARGV[5] 'queue' (wait in
-- line) or 'once', ARGV[6] unused (the hold count before: always 0),
-- ARGV[7] the acquisition's secret, ARGV[8] this client's label, ARGV[9]
-- the weight (permits asked for, >= 1), ARGV[10] the capacity of a
-- semaphore that has none yet, ARGV[11] 'cluster' on a Redis Cluster (see
-- slots_move)
-- Returns {1, token} acquired (or claimed a grant made while it waited),
-- {3, ms until the soonest holder's lease may end (-1: none), position,
-- server ms} waiting, {4} busy (mode 'once'), {6, capacity} refused: more
-- permits asked for than the semaphore has (it leaves the line).
--
-- Fair: a request is granted at once only when it fits and nobody live
-- waits; a head that does not fit is not passed (permits may idle).
-- Cost: O(log N) in the waiters and holders, plus the grants an expired
-- holder's reclaim makes (each once) and dead waiters dropped (each once).
local id, lease, waiter_ttl, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local queue, nonce, weight = ARGV[5] == 'queue', ARGV[7], counter(ARGV[9])
slots_move = ARGV[11] == 'cluster'
if not weight or weight < 1 then
  return redis.error_reply('ERR fairlock: the weight must be a decimal integer >= 1')
end
-- Reads first: bad data is refused before anything is written.
local err = weighted_check_types(true) or read_meta() or sem_read(counter(ARGV[10]))
if err then
  return err
end
-- A lost hold key (see own_hold) is deleted below, once every read is
-- done, and this acquisition is a fresh one.
local held, bad, orphan = own_hold(id)
if bad then
  return bad
end
if not held.owner and kind.never_fits(weight) then
  -- Nothing is written (but its place in line, if the total was lowered
  -- beneath its request while it waited). A head that left may let the
  -- waiters behind it in (admit() stopped the line at it): they are
  -- admitted now, not at their next attempt.
  if leave_queue(id) == 1 then
    after_release(prefix, waiter_ttl)
  end
  return {6, sem.capacity}
end

if orphan then
  redis.call('del', hold_key(id))
end

local now, now_us = server_now()
if not sem.stored or sem.stale then
  sem_write()
  keep(KEYS[4], waiter_ttl + META_GRACE_MS)
end
-- A waiter's record (its lease, ttl, secret and weight) is written again
-- when it was lost or is not the one this acquisition wrote (another
-- program wrote over it: a weight of 0, a malformed one): admit() grants
-- no request whose weight it cannot read.
local record = ARGV[2] .. ':' .. ARGV[3] .. ':' .. nonce .. ':w' .. decimal(weight)
if queue and redis.call('zscore', KEYS[2], id) and redis.call('hget', KEYS[5], id) ~= record then
  redis.call('hset', KEYS[5], id, record)
  keep(KEYS[5], waiter_ttl, ARGV[3])
end
purge_dead(now)
-- Holders whose lease ended make room: the line's head goes first (it may
-- be this very waiter, whose grant is then claimed below).
reclaim(now)
admit(prefix, waiter_ttl, now, now_us)

local mine = hold_of(id)
if mine.owner and mine.weight ~= weight then
  -- A grant made at the weight of a line record another program wrote
  -- over (its grant message, signed over that weight, was not trusted):
  -- the hold is made to weigh what this acquisition asked for. Lowered,
  -- the difference comes back to the line; raised, when the difference
  -- fits (the grant was this waiter's turn); otherwise it is given back
  -- whole and this waiter goes back to the head of the line.
  local more = weight - mine.weight
  if more < 0 or kind.fits(id, more) then
    sem.used = math.max(0, sem.used + more)
    if sem.weights and sem.weights[id] then
      sem.weights[id] = weight
    end
    redis.call('hset', hold_key(id), 'weight', decimal(weight))
    sem_write()
    redis.call('hset', KEYS[4], 'w:' .. id, decimal(weight))
    mine.weight = weight
    if more < 0 then
      admit(prefix, waiter_ttl, now, now_us)
    end
  else
    drop_hold(id, mine.weight)
    if kind.never_fits(weight) then
      -- The total was lowered beneath the request since it queued (the
      -- grant, at the record's weight, fitted the new total): it leaves
      -- with the error, as a waiter refused at the head does (above), and
      -- what it gave back admits the line behind it. Queued again, it
      -- would stop the line until its next attempt.
      after_release(prefix, waiter_ttl)
      return {6, sem.capacity}
    end
    if queue then
      local head = redis.call('zrange', KEYS[2], '0', '0', 'withscores')[2]
      local seq
      if head then
        seq = decimal(tonumber(head) - 1)
      else
        local _, text = next_counter('seq', now_us)
        seq = text
      end
      redis.call('zadd', KEYS[2], seq, id)
      redis.call('zadd', KEYS[3], decimal(now + waiter_ttl), id)
      redis.call('hset', KEYS[5], id, record)
      keep(KEYS[5], waiter_ttl, ARGV[3])
    end
    mine = {}
  end
end
if mine.owner then
  -- This acquisition's own hold (a grant made to it, or an attempt whose
  -- reply was lost): claimed, never counted again.
  leave_queue(id)
  redis.call('hset', hold_key(id), 'claimed', '1')
  -- GT: never shortens what the hold was given.
  redis.call('pexpire', hold_key(id), ARGV[2], 'gt')
  redis.call('zadd', KEYS[1], 'gt', decimal(now + lease), id)
  keep(KEYS[1], lease, ARGV[2])
  keep(KEYS[4], lease + META_GRACE_MS)
  write_label(KEYS[6], id, ARGV[8], ARGV[2])
  return {1, counter(mine.token)}
end

if kind.fits(id, weight) and not first_live(now) then
  leave_queue(id)
  write_label(KEYS[6], id, ARGV[8], ARGV[2])
  local token = grant(id, lease, ARGV[2], now, now_us, '1', nonce, weight)
  return {1, token}
end

if not queue then
  return {4}
end
if not redis.call('zscore', KEYS[2], id) then
  local _, seq = next_counter('seq', now_us)
  redis.call('zadd', KEYS[2], seq, id)
  redis.call('hset', KEYS[5], id, record)
  keep(KEYS[5], waiter_ttl, ARGV[3])
end
redis.call('zadd', KEYS[3], decimal(now + waiter_ttl), id)
keep_line(waiter_ttl, ARGV[3])
keep(KEYS[4], waiter_ttl + META_GRACE_MS)
write_label(KEYS[6], id, ARGV[8], ARGV[3])
local soonest = redis.call('zrange', KEYS[1], '0', '0', 'withscores')[2]
local wait = -1
if soonest then
  wait = math.max(0, tonumber(soonest) - now)
end
return {3, wait, redis.call('zrank', KEYS[2], id) + 1, now}
