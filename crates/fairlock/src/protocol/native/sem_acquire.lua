-- Native semaphore: take `weight` permits at once, claim a grant made
-- while waiting, or wait in line (and keep the place alive, as the lock's
-- waiters do).
-- KEYS[1..4] see weighted_prelude.lua
-- ARGV[1] holder id (a fresh owner per acquisition), ARGV[2] lease ms,
-- ARGV[3] waiter ttl ms, ARGV[4] channel prefix, ARGV[5] 'queue' (wait in
-- line) or 'once', ARGV[6] unused (the hold count before: always 0),
-- ARGV[7] the acquisition's secret, ARGV[8] this client's label (kept in
-- the hold, or in the waiter's record, for inspect), ARGV[9]
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
-- holder's reclaim makes (each once) and dead waiters dropped at the head
-- (each once).
local id, lease, waiter_ttl, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local queue, nonce, weight, label = ARGV[5] == 'queue', ARGV[7], counter(ARGV[9]), ARGV[8]
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
  if leave(id) == 1 then
    after_release(prefix)
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
-- A waiter's record (its lease, ttl, secret, weight and label) is written
-- again before the admission when it is not the one this acquisition
-- wrote (another program wrote over it: a weight of 0, or another weight):
-- admit() grants no request whose weight it cannot read, and grants a
-- written-over weight that fits (see below). A record that does not parse
-- counts as dead: its waiter joins again at the end (wait_in_line).
local weight_text = decimal(weight)
local rank = redis.call('zrank', KEYS[2], id)
local record = record_of(redis.call('hget', KEYS[3], id))
if queue and rank and record then
  local asked, had = weight_of(record)
  if asked ~= weight or record.nonce ~= nonce or record.lease ~= lease or had ~= label then
    local text = waiter_record(now, ARGV[2], ARGV[3], waiter_ttl, nonce, weight_text, label)
    redis.call('hset', KEYS[3], id, text)
    record = record_of(text)
  end
end
-- Holders whose lease ended make room: the line's head goes first (it may
-- be this very waiter, whose grant is then claimed below).
reclaim(now)
-- Its own old entry in the holders set, its key gone (a grant it did not
-- claim in time): reclaimed now when due, and while not it keeps this
-- request from a grant (see make_way).
local clear = held.owner ~= nil or make_way(id, now)
admit(prefix, now, now_us)

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
      admit(prefix, now, now_us)
    end
  else
    drop_hold(id, mine.weight)
    if kind.never_fits(weight) then
      -- The total was lowered beneath the request since it queued (the
      -- grant, at the record's weight, fitted the new total): it leaves
      -- with the error, as a waiter refused at the head does (above), and
      -- what it gave back admits the line behind it. Queued again, it
      -- would stop the line until its next attempt.
      after_release(prefix)
      return {6, sem.capacity}
    end
    if queue then
      -- Back at the head: an arrival number below the head's (or the
      -- clock's, the line empty).
      local head = redis.call('zrange', KEYS[2], '0', '0', 'withscores')[2]
      redis.call('zadd', KEYS[2], decimal(head and tonumber(head) - 1 or now_us), id)
      local text = waiter_record(now, ARGV[2], ARGV[3], waiter_ttl, nonce, weight_text, label)
      redis.call('hset', KEYS[3], id, text)
      keep_line(waiter_ttl, ARGV[3])
      record = record_of(text)
    end
    mine = {}
  end
end
if mine.owner then
  -- This acquisition's own hold (a grant made to it, or an attempt whose
  -- reply was lost): claimed, never counted again.
  leave(id)
  redis.call('hset', hold_key(id), 'claimed', '1', 'label', label)
  -- GT: never shortens what the hold was given.
  redis.call('pexpire', hold_key(id), ARGV[2], 'gt')
  redis.call('zadd', KEYS[1], 'gt', decimal(now + lease), id)
  keep(KEYS[1], lease, ARGV[2])
  keep(KEYS[4], lease + META_GRACE_MS)
  return {1, counter(mine.token)}
end

if clear and kind.fits(id, weight) and not first_live(now) then
  leave(id)
  local token = grant(id, lease, ARGV[2], now, now_us, '1', nonce, weight, label)
  return {1, token}
end

if not queue then
  return {4}
end
-- (The admission may have dropped this waiter from the head, dead: its
-- rank is read again.)
rank = wait_in_line(id, redis.call('zrank', KEYS[2], id), record, now, now_us, ARGV[2], ARGV[3], nonce,
  weight_text, label)
local soonest = redis.call('zrange', KEYS[1], '0', '0', 'withscores')[2]
local wait = -1
if soonest then
  wait = math.max(0, tonumber(soonest) - now)
end
return {3, wait, rank + 1, now}
