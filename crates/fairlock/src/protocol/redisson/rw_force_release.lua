-- Read-write lock (Redisson's RReadWriteLock): release every hold of one
-- mode (Redisson's forceUnlock of the read or of the write lock).
-- KEYS[1] lock hash, KEYS[2] channel ('redisson_rwlock:{NAME}')
-- ARGV[1] 'read' or 'write', ARGV[2] revocation channel prefix (fairlock's)
-- Returns 1 when the lock was in that mode and was deleted, else 0.
-- The read holds' timeout keys are left to expire, as Redisson leaves them
-- (each lives its hold's lease at most; no lock decision counts a key
-- whose field is gone).
-- rw_state's HGETALL is the first touch: another type fails there,
-- before anything is written.
local state, bad = rw_state(KEYS[1])
if bad then
  return bad
end
if state.mode ~= ARGV[1] then
  return 0
end
-- Tell each holder's client (fairlock's channel; Redisson clients do not
-- listen to it) that its hold was taken away.
local revoked_prefix = ARGV[2]
for field in pairs(state.counts) do
  local client = string.match(field, '^(.*):%d+$') or string.match(field, '^(.*):%d+:write$')
  if client then
    redis.call('publish', revoked_prefix .. client, KEYS[1])
  end
end
redis.call('del', KEYS[1])
if ARGV[1] == 'read' then
  redis.call('publish', KEYS[2], '0')
else
  redis.call('publish', KEYS[2], '1')
end
return 1
