-- Native lock: one waiter's place in line (read-only).
-- KEYS[1..3] see lock_prelude.lua
-- ARGV[1] owner
-- Returns {position (1-based, 0 when not queued), queue length}. Cost: O(log N).
local rank = redis.call('zrank', KEYS[2], ARGV[1])
return {rank and rank + 1 or 0, redis.call('zcard', KEYS[2])}
