-- Expirable semaphore: the watchdog's renewal of one guard's permits
-- (Redisson's updateLeaseTime, for each id).
-- KEYS as sem_acquire.lua; ARGV[1] now (ms, this client's clock), ARGV[2]
-- the new score (now + lease), ARGV[3..] the permit ids (32 hex digits)
-- Returns the number of ids no longer taken (0: every one renewed). A
-- permit that is gone is never written again (it may be somebody else's
-- now): the guard has lost it.
local now = ARGV[1]
local _, bad = open_expirable('', now, nil)
if bad then
  return bad
end
local missing = 0
for i = 3, #ARGV do
  local id = from_hex(ARGV[i])
  if redis.call('zscore', KEYS[2], id) then
    redis.call('zadd', KEYS[2], 'xx', ARGV[2], id)
  else
    missing = missing + 1
  end
end
return missing
