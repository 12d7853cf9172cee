-- Watchdog: extend the lease of every lock in the batch still held by its
-- owner, or only check it.
-- KEYS[i] (i <= N) lock hash, KEYS[N + i] fairlock's labels of that lock
-- (optional: all or none); ARGV[1] lease ms, or '' to check without
-- extending; ARGV[2] this client's label ('' for none); ARGV[2i + 1] owner
-- of KEYS[i], ARGV[2i + 2] unused (the native protocol's token);
-- N = (#ARGV - 2) / 2
-- Returns one integer per lock: 1 held (renewed); lost: 0 the key is gone,
-- 2 another owner holds it (or the key holds another type, or, for a read
-- hold of a read-write lock, every one of its timeout keys expired); then
-- one more integer per lock: for a read hold found held, the hash's TTL in
-- ms as found, before this call extended it (-1 none), else 0. A read-write
-- lock keeps one TTL for its hash, and a Redisson reader's renewal sets it
-- to that client's lease (plain PEXPIRE), however short: the caller renews
-- again before what it found runs out.
-- A read-write lock's writer is the owner 'CLIENT:THREAD:write' (its field);
-- a reader is 'CLIENT:THREAD', told from a plain lock's owner by the hash's
-- 'mode' field (see rw_prelude.lua).
local lease, label = ARGV[1], ARGV[2]
local renewed, found = {}, {}
local n = (#ARGV - 2) / 2
for i = 1, n do
  local key = KEYS[i]
  local owner = ARGV[2 * i + 1]
  -- Only a hash with this owner's own field is renewed (owner ids are
  -- random per client): data that is not its lock is "not ours" (2).
  local held = redis.pcall('hexists', key, owner)
  found[i] = 0
  if held == 1 and not is_writer(owner) and redis.call('hexists', key, 'mode') == 1 then
    found[i] = redis.call('pttl', key)
    -- A read hold of a read-write lock: its leases are its timeout keys
    -- ('{NAME}:OWNER:rwlock_timeout:1..count'), extended with the hash.
    -- When all of them expired, the hold's lease ran out: any release of
    -- another reader may now delete the lock, so the hold is lost. While
    -- one lives, no release deletes the lock (a release counts every key
    -- of every reader): the hold is held, and its live keys are extended.
    -- A key that expired (an owner's re-entry with a shorter explicit
    -- lease that ran out) stays gone: only this owner's own release can
    -- remove the key above it, and that release hands the removed key's
    -- lease down to the key below (rw_read_release.lua).
    local count = counter(redis.call('hget', key, owner)) or 0
    if count > MAX_READ_HOLDS then
      -- Not a count fairlock or Redisson wrote: not ours.
      count = 0
    end
    local prefix = timeout_prefix(key)
    local alive = {}
    for k = 1, count do
      local timeout = timeout_key(prefix, owner, k)
      if redis.call('pttl', timeout) ~= -2 then
        alive[#alive + 1] = timeout
      end
    end
    if #alive == 0 then
      held = 0
    elseif lease ~= '' then
      for _, timeout in ipairs(alive) do
        redis.call('pexpire', timeout, lease, 'gt')
      end
    end
  end
  if held == 1 then
    if lease ~= '' then
      -- GT: a renewal never shortens what a longer hold of the same owner
      -- (a re-entry with a longer explicit lease) was given.
      redis.call('pexpire', key, lease, 'gt')
      write_label(KEYS[n + i], owner, label, lease)
    end
    renewed[i] = 1
  elseif redis.call('exists', key) == 0 then
    renewed[i] = 0
  else
    -- Another owner, or not a hash: the lock is not ours.
    renewed[i] = 2
  end
  if renewed[i] ~= 1 then
    found[i] = 0
  end
end
for i = 1, n do
  renewed[n + i] = found[i]
end
return renewed
