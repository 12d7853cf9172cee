-- Read-write lock (Redisson's RReadWriteLock): release one read hold.
-- KEYS[1] lock hash, KEYS[2] channel ('redisson_rwlock:{NAME}'), KEYS[3]
-- unlock result cache of this request
-- ARGV[1] owner 'CLIENT:THREAD', ARGV[2] cache ttl ms
-- Returns 1 the owner's last read hold released, 0 the owner still holds
-- read holds, -1 the owner holds no read hold while others hold the lock,
-- -2 nobody holds it. The first touches (GET, HGETALL) are reads: another
-- type fails before anything is written.
--
-- As Redisson: the hold's timeout key goes; while other holds are left, the
-- hash lives as long as the longest-lived read hold's timeout key (only in
-- read mode: in write mode the writer's lease stays as it is). When only
-- holds of readers whose timeout keys expired are left (crashed readers),
-- or nothing, the lock is deleted and '0' published.
local owner = ARGV[1]
local done, state = release_start(KEYS[3])
if done then
  return done
end
local held = state.counts[owner]
if not held then
  return -1
end
local left = held - 1
local reply = 1
if left > 0 then
  reply = 0
end
-- The cache first: under maxmemory (OOM) SET is refused before any effect.
redis.call('set', KEYS[3], reply, 'px', ARGV[2])
local prefix = timeout_prefix(KEYS[1])
if left > 0 then
  redis.call('hincrby', KEYS[1], owner, -1)
  state.counts[owner] = left
else
  redis.call('hdel', KEYS[1], owner)
  state.counts[owner] = nil
end
-- Holds go last-in first-out by key, not by guard: the hold released may
-- be any of the owner's, and the key deleted is always the last one's. So
-- the key left on top takes over the deleted key's lease when that is the
-- longer: the owner's keys keep covering the longest lease of the holds
-- still held (else a short hold released first would leave a longer one
-- with the short one's lease, and another release, or the hash's expiry,
-- would free the lock under it).
local top = timeout_key(prefix, owner, held)
if left > 0 then
  local gone = redis.call('pttl', top)
  local below = timeout_key(prefix, owner, left)
  if gone > 0 and redis.call('pttl', below) < gone then
    redis.call('set', below, 1, 'px', gone)
  end
end
redis.call('del', top)
local longest, others = -3, false
for field, count in pairs(state.counts) do
  others = true
  if not is_writer(field) then
    for i = count, 1, -1 do
      longest = math.max(longest, redis.call('pttl', timeout_key(prefix, field, i)))
    end
  end
end
if others then
  if state.mode == 'write' then
    return reply
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return reply
  end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return reply
