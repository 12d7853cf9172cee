-- Native lock: the uncontended acquire, run before the prelude's helpers
-- are even defined (defining them costs as much as a few Redis calls).
-- Arguments as in acquire.lua. Its reads (`lock`, `waiting`) are reused
-- there when this fast path does not apply.
--
-- Free and nobody queued: take it. Type checks without TYPE: the lock's
-- first touch is HMGET, the queue's ZRANGE, meta's HGET, all reads that
-- fail on another type before anything is written. Nobody waits, so no
-- waiter's refresh made meta live longer than this grant needs: its TTL is
-- set rather than kept (it still outlives the grant by 20 s). Numbers go to
-- Redis as strings where they can (Lua formats numbers with sprintf).
local lock = redis.call('hmget', KEYS[1], 'owner', 'token', 'count', 'nonce')
local waiting = redis.call('zrange', KEYS[2], '0', '0')[1] ~= nil
if not lock[1] and not waiting then
  local time = redis.call('time')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local token = math.max(tonumber(redis.call('hget', KEYS[4], 'token') or '0') + 1, now_us)
  local text = string.format('%.0f', token)
  redis.call('hset', KEYS[4], 'token', text)
  redis.call('hset', KEYS[1], 'owner', ARGV[1], 'count', '1', 'token', text, 'claimed', '1', 'nonce', ARGV[8])
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('pexpire', KEYS[4], tonumber(ARGV[2]) + 20000)
  return {1, token}
end
