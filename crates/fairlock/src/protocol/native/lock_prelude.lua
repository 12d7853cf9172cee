-- fairlock native lock prelude: the lock's own helpers, after the native
-- prelude (whose line helpers they use). Prepended to the lock's scripts
-- only: the read-write lock and the semaphore (weighted_prelude.lua) do
-- not define them, as every function a script defines costs its every
-- call (EVALSHA runs the whole chunk again).

-- A queued waiter's record: the lease it asked for, its own waiter ttl and
-- the secret (nonce) that authenticates its grant message. Written as
-- 'LEASE:TTL:NONCE'; anything else (a record from another version, or
-- garbage) falls back to `default_ttl` and an empty nonce, which no waiter
-- of this version accepts, so it confirms the grant with a call. Its
-- numbers are checked as counters (an out-of-range one falls back too): it
-- is read after the release's first write, so it is never refused, and a
-- bad one never reaches PEXPIRE.
local function waiter_record(owner, default_ttl)
  local record = redis.call('hget', KEYS[5], owner) or ''
  local lease, ttl, nonce = string.match(record, '^(%d+):(%d+):(.*)$')
  lease, ttl = counter(lease), counter(ttl)
  if not lease or not ttl then
    return counter(record) or default_ttl, default_ttl, ''
  end
  return lease, ttl, nonce
end

-- Make `owner` the holder of the free lock (no lock key) under a new fencing
-- token, expiring after `expire_ms` (`expire_text` as text). `claimed`: '1'
-- when the caller itself takes it, '0' for a handoff its new holder has not
-- acted on yet. `nonce` identifies the acquisition (clean-up of an older
-- acquisition by the same owner checks it and leaves this one alone).
-- Returns the token and its text.
local function take(owner, expire_ms, expire_text, now_us, claimed, nonce)
  local token, text = next_counter('token', now_us)
  redis.call('hset', KEYS[1], 'owner', owner, 'count', '1', 'token', text, 'claimed', claimed,
    'nonce', nonce)
  redis.call('pexpire', KEYS[1], expire_text)
  keep(KEYS[4], expire_ms + META_GRACE_MS)
  return token, text
end

-- Hand the free lock to the first live waiter and tell it on its channel.
-- The grant lasts min(its lease, its own waiter ttl) until the new holder
-- claims it, so a grant to a waiter that just died is reclaimed quickly.
-- The message 'grant:TOKEN:SERVER_MS:EXPIRE_MS:MAC' carries the token, the
-- server time of the grant and the PEXPIRE set, and MAC = sha1 of
-- 'NONCE:grant:TOKEN:SERVER_MS:EXPIRE_MS' with the secret the waiter sent
-- when it queued: only the server state and that waiter know it, so a
-- message published by anyone else is not taken for a grant.
-- Returns the new holder, or false when nobody (alive) waits.
local function hand_off(channel_prefix, default_ttl, now, now_us)
  local head = first_live(now)
  if not head then
    return false
  end
  local lease, ttl, nonce = waiter_record(head, default_ttl)
  leave_queue(head)
  local expire = math.max(1, math.min(lease, ttl))
  local expire_text = decimal(expire)
  local _, token = take(head, expire, expire_text, now_us, '0', nonce)
  local grant = 'grant:' .. token .. ':' .. decimal(now) .. ':' .. expire_text
  redis.call('publish', channel_prefix .. ':' .. head, grant .. ':' .. redis.sha1hex(nonce .. ':' .. grant))
  return head
end

-- A waiter of the non-fair lock that has waited this long (since it queued)
-- is no longer overtaken: the lock is handed to it as to a fair waiter.
-- Barging keeps the lock busy while a woken waiter is on its way; this
-- bound keeps a waiter from being overtaken forever by holders that
-- release and acquire again at once.
local STARVE_US = 10000

-- Has `waiter` (queued) waited longer than STARVE_US?
local function starving(waiter, now_us)
  local arrival = tonumber(redis.call('zscore', KEYS[2], waiter))
  return arrival ~= nil and arrival < now_us - STARVE_US
end

-- Wake one waiter of a non-fair lock: the first live one, on its own
-- channel. It stays in line; its next attempt takes the free lock, or
-- (overtaken meanwhile) it waits for the next release, which wakes it
-- again. A waiter that has waited longer than STARVE_US is handed the lock
-- instead. Returns false when nobody (alive) waits.
local function wake_one(channel_prefix, default_ttl, now, now_us)
  local head = first_live(now)
  if not head then
    return false
  end
  if starving(head, now_us) then
    return hand_off(channel_prefix, default_ttl, now, now_us)
  end
  redis.call('publish', channel_prefix .. ':' .. head, 'free')
  return head
end

-- The holder is gone: hand the lock to the next live waiter (fair), or free
-- it and wake one waiter (non-fair). `waiting`: the queue was not empty
-- (else only the lock key is deleted: nobody to hand it to or to wake).
local function release_fully(channel_prefix, default_ttl, fair, waiting)
  redis.call('del', KEYS[1])
  if not waiting then
    return
  end
  local now, now_us = server_now()
  purge_dead(now)
  local passed
  if fair then
    passed = hand_off(channel_prefix, default_ttl, now, now_us)
  else
    passed = wake_one(channel_prefix, default_ttl, now, now_us)
  end
  if not passed then
    -- Nobody alive waits: the name's last key goes with the release caches.
    redis.call('pexpire', KEYS[4], META_GRACE_MS)
  end
end

-- Tell the client of `holder` (owner 'CLIENT:N') that a hold of this lock
-- was taken away, on 'PREFIX:CLIENT'. The message only makes the client
-- check its holds with a call; a forged one costs that call and nothing else.
local function revoke(revoked_prefix, holder)
  local client = string.match(holder, '^(.*):[^:]*$')
  if client then
    redis.call('publish', revoked_prefix .. client, KEYS[1])
  end
end

-- The types of the lock's five keys. `meta_read_next`: the caller reads
-- meta next, before any write (read_meta(): its HMGET fails on another
-- type as TYPE would, and the client takes either WRONGTYPE error alike),
-- so meta's TYPE is not asked.
local function check_types(meta_read_next)
  return wrong_type(KEYS[1], 'hash') or wrong_type(KEYS[2], 'zset') or wrong_type(KEYS[3], 'zset')
    or (not meta_read_next and wrong_type(KEYS[4], 'hash')) or wrong_type(KEYS[5], 'hash')
end

-- The types of the keys besides the lock and the queue, for the paths that
-- touch them; the lock's and the queue's are checked by each script's first
-- reads (HMGET, ZRANGE), which fail on another type before anything is
-- written. `meta_read_next` as for check_types.
local function check_line_types(meta_read_next)
  return wrong_type(KEYS[3], 'zset') or (not meta_read_next and wrong_type(KEYS[4], 'hash'))
    or wrong_type(KEYS[5], 'hash')
end
