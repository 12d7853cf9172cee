-- fairlock native lock (the fair and the non-fair mutex), layout version 2:
-- the helpers of its scripts, after common.lua and line.lua (the line's
-- helpers, shared with the read-write lock and the semaphore:
-- server_now, decimal, record_of, leave_line, first_live, keep_line).
--
-- Every script passes the lock's keys in this order:
--   KEYS[1] lock, a string:
--           held  'TOKEN:COUNT:FLAGS:NONCE:REQUEST:OWNER<TAB>LABEL'
--           free  'TOKEN:0:FLAGS::REQUEST:' (a marker, for 20 s or more)
--           TOKEN the fencing token of the hold (free: of the last one),
--           COUNT its holds (free: 0), NONCE the acquisition's secret,
--           REQUEST the id of the release that ended the hold before it
--           (free: the release that freed it; after a force-unlock or a
--           give-up, the one the removed hold carried): a release sent
--           again under that id answers 1.
--           LABEL the holder's client label (for `inspect` only; labels
--           hold no control characters, owner ids no tab).
--   KEYS[2] line: sorted set, waiter -> arrival number (FIFO order)
--   KEYS[3] waiters: hash, waiter -> 'DEADLINE:LEASE:TTL:NONCE:LABEL' (its
--           liveness deadline in server ms, the lease it asked for, its own
--           waiter ttl, the secret of its grant message, its client's label)
-- FLAGS, letters in this order when set:
--   u  unclaimed: handed to a waiter that has not confirmed it yet
--   p  partly released at least once: a retried release reads its cache
--   w  the line may not be empty: a release or a take must look at it
--      (a hint that may outlive the last waiter, never missing while one
--      waits: invariant W)
--   k  (with w) the head of the line was woken by a release and had not
--      waited long, and no waiter has been back since: on a free marker, a
--      non-fair taker not in line may take it first; on the value of such
--      a taker, its release wakes nobody (the woken waiter is still on its
--      way) and leaves the marker with w and k again. A waiter's attempt on
--      a held lock, or a give-up, clears it.
-- Invariant W: while the line has a waiter, the lock key is absent or its
-- value has the flag w. Every script that adds a waiter sets it; every
-- value written while the line may have one keeps it. So a value without
-- w proves the line empty, and the uncontended paths read nothing else.
-- All time is the Redis server's (TIME); no client clock is ever used.

-- How long the free marker stays after a force-unlock or a give-up (a
-- release keeps it as long as its answer cache would live, at least as
-- long): the next take continues the tokens from it.
local FREE_MS = '20000'
-- A non-fair waiter that has waited this long since it joined the line is
-- no longer overtaken: a release (or a free lock found by a taker) hands
-- the lock to it, as to a fair waiter.
local STARVE_US = 100000

local PATTERN = '^(%d+):(%d+):(%l*):([^:]*):([^:]*):([^\t]*)\t?(.*)$'

-- Has the flag letter `f` (a one-letter string) been set in `flags`?
local function flagged(flags, f)
  return string.find(flags, f, 1, true) ~= nil
end

-- `flags` with the letters of `add` set and those of `drop` cleared, in
-- the canonical order.
local function with_flags(flags, add, drop)
  local out = ''
  for _, f in ipairs({'u', 'p', 'w', 'k'}) do
    if (flagged(flags, f) or flagged(add, f)) and not flagged(drop, f) then
      out = out .. f
    end
  end
  return out
end

-- The lock key's value as text.
local function held_value(token, count, flags, nonce, request, owner, label)
  return token .. ':' .. count .. ':' .. flags .. ':' .. nonce .. ':' .. request .. ':' .. owner .. '\t'
    .. label
end

local function free_value(token, flags, request)
  return token .. ':0:' .. flags .. '::' .. request .. ':'
end

-- `lock` (see lock_of) written again with `count` and `flags`, and the
-- secret `nonce`, keeping its TTL.
local function rewrite(lock, count, flags, nonce)
  redis.call('set', KEYS[1], held_value(lock.text, count, flags, nonce, lock.request, lock.owner, lock.label),
    'keepttl')
end

-- The error for a lock key that is not a string: a hash with an owner, a
-- count and a token is the lock of the layout before version 2 (a client of
-- an older fairlock holds it), anything else is another program's data.
local function layout_error()
  local kind = redis.call('type', KEYS[1])['ok']
  local fields = kind == 'hash' and redis.call('hmget', KEYS[1], 'owner', 'count', 'token')
  if fields and fields[1] and fields[2] and fields[3] then
    return redis.error_reply('OLDLAYOUT 1 1 held by a client of the native layout version 1')
  end
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind .. ', expected a string')
end

-- The lock as a table, from what GET answered (`raw`: false when absent,
-- an error table for another type), or nil and the error to answer:
--   {absent = true, token = 0, count = 0, flags = '', request = ''}
--   {token, text (TOKEN as stored), count, flags, nonce, request, owner,
--    label}
-- `owner` is nil when free. A value that does not parse, or whose numbers
-- are not counters (decimal integers below 2^53), is refused (NOTALOCK):
-- it is another program's data.
local function lock_of(raw)
  if raw == false then
    return {absent = true, token = 0, count = 0, flags = '', nonce = '', request = ''}
  end
  if type(raw) ~= 'string' then
    -- Not readable here (in a Cluster slot migrating away, a key already
    -- moved is refused to a script): read again without pcall, which fails
    -- the script with the server's own error, and the client follows it.
    if not string.find(raw.err or '', 'WRONGTYPE', 1, true) then
      redis.call('get', KEYS[1])
    end
    return nil, layout_error()
  end
  local token, count, flags, nonce, request, owner, label = string.match(raw, PATTERN)
  local t, c = counter(token), counter(count)
  if not t or not c or (c == 0) ~= (owner == '') then
    return nil, not_a_lock(1, 'the lock key holds a string that is not a lock of this layout')
  end
  return {token = t, text = token, count = c, flags = flags, nonce = nonce, request = request,
    owner = owner ~= '' and owner or nil, label = label}
end

-- Has a non-fair waiter that arrived at `arrival` (µs) waited too long to
-- be overtaken?
local function starving(arrival, now_us)
  return arrival < now_us - STARVE_US
end

-- The next fencing token after `last`: above it and not below the server
-- clock in µs (so tokens keep increasing after every key of the name
-- expired, as long as the clock does not step back).
local function next_token(last, now_us)
  return math.max(last + 1, now_us)
end

-- Does `lock`'s token leave no next one below 2^53 (a counter, see
-- common.lua)? Then none is drawn: the take refuses the lock as another
-- program's data, a release frees it without handing it over. (Server
-- microseconds reach it in the year 2255; before that, only a value
-- another program wrote.)
local function exhausted(lock)
  return lock.token >= MAX_COUNTER - 1
end

-- Hand the free lock to `head` (first_live's answer) and tell it on its
-- channel. The grant lasts min(its lease, its own waiter ttl) until the new
-- holder claims it, so a grant to a waiter that just died passes on soon.
-- The message 'grant:TOKEN:SERVER_MS:EXPIRE_MS:MAC' carries the token, the
-- server time of the grant and the PEXPIRE set, and MAC = sha1 of
-- 'NONCE:grant:TOKEN:SERVER_MS:EXPIRE_MS' with the secret the waiter sent
-- when it joined the line: nobody without the records' content can forge
-- it. The value keeps w (others may wait behind the head) and carries
-- `request` (the release that ended the hold before). The lock is written
-- first: SET is refused under maxmemory before anything else changed.
local function hand_off(head, record, last, request, now, now_us)
  local expire = decimal(math.max(1, math.min(record.lease, record.ttl)))
  local token = decimal(next_token(last, now_us))
  redis.call('set', KEYS[1], held_value(token, '1', 'uw', record.nonce, request, head, record.label), 'px',
    expire)
  leave_line(head)
  local grant = 'grant:' .. token .. ':' .. decimal(now) .. ':' .. expire
  redis.call('publish', string.sub(KEYS[1], 1, -5) .. 'wake:' .. head,
    grant .. ':' .. redis.sha1hex(record.nonce .. ':' .. grant))
end

-- The holder is gone (the lock's last hold released, force-released, or a
-- grant given up): free the lock, or pass it on. Without w nobody waits:
-- the free marker alone. Otherwise the first live waiter gets it (fair, or
-- a non-fair one that waited too long), or it is woken with 'free' on its
-- channel and the marker says so (k: a non-fair taker may come first; the
-- woken waiter then finds it taken and waits for the next wake-up).
-- `request`: the release's id ('' for none); `free_ms`: how long the
-- marker stays (text).
local function release_fully(lock, request, fair, free_ms)
  if not flagged(lock.flags, 'w') then
    redis.call('set', KEYS[1], free_value(lock.text, '', request), 'px', free_ms)
    return
  end
  if exhausted(lock) then
    -- No token to hand over: free, w kept (the waiters' next attempts are
    -- refused, see acquire.lua).
    redis.call('set', KEYS[1], free_value(lock.text, 'w', request), 'px', free_ms)
    return
  end
  local now, now_us = server_now()
  local head, arrival, record = first_live(now)
  if not head then
    redis.call('set', KEYS[1], free_value(lock.text, '', request), 'px', free_ms)
  elseif fair or starving(arrival, now_us) then
    hand_off(head, record, lock.token, request, now, now_us)
  else
    redis.call('set', KEYS[1], free_value(lock.text, 'wk', request), 'px', free_ms)
    redis.call('publish', string.sub(KEYS[1], 1, -5) .. 'wake:' .. head, 'free')
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
