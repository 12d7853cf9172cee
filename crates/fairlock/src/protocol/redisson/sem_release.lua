-- Expirable semaphore: give back the caller's permits.
-- KEYS as sem_acquire.lua; ARGV[1] now (ms, this client's clock), ARGV[2..]
-- the permit ids (32 hex digits each)
-- Returns {released, lost}: `released` permits were taken and within their
-- lease, and are given back; `lost` were gone (reclaimed, removed by
-- hand) or past their lease (reclaimed here).
-- As Redisson's tryRelease(ids): expired permits are reclaimed first, the
-- caller's are removed and added to the count, and their number is
-- published. Unlike it, the caller's live permits are given back even
-- when some of its others were lost (it would keep them all).
local now = tonumber(ARGV[1])
local _, bad = available_of(KEYS[1])
if bad then
  return bad
end
local live, lost = {}, 0
for i = 2, #ARGV do
  local id = from_hex(ARGV[i])
  local score = redis.call('zscore', KEYS[2], id)
  if score and tonumber(score) > now then
    live[#live + 1] = id
  else
    lost = lost + 1
  end
end
open_expirable('', ARGV[1], nil)
local released = 0
if #live > 0 then
  released = zrem_all(KEYS[2], live)
  redis.call('incrby', KEYS[1], released)
  redis.call('publish', KEYS[3], released)
end
return {released, lost}
