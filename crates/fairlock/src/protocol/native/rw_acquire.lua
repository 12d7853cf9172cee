-- Native read-write lock: acquire a side, re-enter it, claim a grant, or
-- wait in line (and keep the place alive, as the lock's waiters do).
-- KEYS[1..4] see weighted_prelude.lua
-- ARGV[1] holder id (OWNER for the read side, OWNER:write for the write
-- side), ARGV[2] lease ms, ARGV[3] waiter ttl ms, ARGV[4] channel prefix,
-- ARGV[5] 'queue' (wait in line) or 'once', ARGV[6] the id's hold count
-- before this acquisition, ARGV[7] the acquisition's secret, ARGV[8] this
-- client's label (kept in the hold, or in the waiter's record, for
-- inspect), ARGV[9] 'cluster' on a Redis Cluster (see slots_move)
-- Returns {1, token} acquired (or claimed a grant made while it waited),
-- {2, count, token} re-entered, {3, ms until the soonest holder's lease
-- may end (-1: none), position, server ms} waiting, {4} busy (mode
-- 'once'), {5} refused: the owner reads, does not write, and asks to write
-- (it would wait for itself).
--
-- Fair: a request is granted at once only when it fits and nobody live
-- waits, or when it is the writer's own read request (a downgrade, which
-- must not queue behind the waiters its write hold keeps out).
-- Cost: O(log N) in the waiters and holders, plus the grants an expired
-- holder's reclaim makes (each once) and dead waiters dropped at the head
-- (each once).
local id, lease, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local queue, base, nonce, label = ARGV[5] == 'queue', tonumber(ARGV[6]), ARGV[7], ARGV[8]
slots_move = ARGV[9] == 'cluster'
-- Reads first: bad data is refused before anything is written.
local err = rw_check_types(true) or read_meta()
if err then
  return err
end
-- A lost hold key (see own_hold) is deleted below, once every read is
-- done, and this acquisition is a fresh one.
local held, bad, orphan = own_hold(id)
if bad then
  return bad
end
-- An upgrade only when the writer does not hold yet: a writer that also
-- reads (a downgrade) re-enters or claims its own write hold, as a retry
-- of its acquisition whose reply was lost does (refused, that hold would
-- be left with no guard until its lease ends).
if is_write(id) and not held.owner then
  local reading, bad_read = hold_of(string.sub(id, 1, -7))
  bad_read = bad_read or elsewhere(string.sub(id, 1, -7), reading)
  if bad_read then
    return bad_read
  end
  if reading.owner and registered(string.sub(id, 1, -7)) then
    return {5}
  end
end
if orphan then
  redis.call('del', hold_key(id))
end

local now, now_us = server_now()
-- Holders whose lease ended make room: the line's head goes first (it may
-- be this very waiter, whose grant is then claimed below).
reclaim(now)
-- Its own old entry in the holders set, its key gone (a grant it did not
-- claim in time): reclaimed now when due, and while not it keeps this
-- request from a grant (see make_way).
local clear = held.owner ~= nil or make_way(id, now)
admit(prefix, now, now_us)

local mine = hold_of(id)
if mine.owner then
  local token, count = counter(mine.token), counter(mine.count)
  -- As the lock's acquire: this acquisition's own hold (a grant made to
  -- it, or an attempt whose reply was lost) is claimed, not counted again.
  local claim = mine.nonce == nonce or count == base + 1 or base == 0
  if claim then
    leave(id)
    redis.call('hset', hold_key(id), 'claimed', '1', 'label', label)
  else
    count = redis.call('hincrby', hold_key(id), 'count', '1')
    redis.call('hset', hold_key(id), 'nonce', nonce, 'claimed', '1', 'label', label)
  end
  -- GT: never shortens what another hold of this id was given.
  redis.call('pexpire', hold_key(id), ARGV[2], 'gt')
  redis.call('zadd', KEYS[1], 'gt', decimal(now + lease), id)
  keep(KEYS[1], lease, ARGV[2])
  if count == 1 then
    return {1, token}
  end
  return {2, count, token}
end

local n, writer = holders_state()
local downgrade = not is_write(id) and writer == id .. ':write'
if clear and fits(id, n, writer) and (downgrade or not first_live(now)) then
  leave(id)
  local token = grant(id, lease, ARGV[2], now, now_us, '1', nonce, 1, label)
  return {1, token}
end

if not queue then
  return {4}
end
local rank = wait_in_line(id, redis.call('zrank', KEYS[2], id), record_of(redis.call('hget', KEYS[3], id)), now,
  now_us, ARGV[2], ARGV[3], nonce, '1', label)
local soonest = redis.call('zrange', KEYS[1], '0', '0', 'withscores')[2]
local wait = -1
if soonest then
  wait = math.max(0, tonumber(soonest) - now)
end
return {3, wait, rank + 1, now}
