-- Fair lock: one waiter's place in line (read-only).
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines
-- ARGV[1] owner
-- Returns {position (1-based, 0 when not queued), queue length}. Cost: O(N) (LPOS on a list).
local index = redis.call('lpos', KEYS[2], ARGV[1])
return {index and index + 1 or 0, redis.call('llen', KEYS[2])}
