-- fairlock prelude, prepended to every redisson-protocol script.

-- Drop queued owners from the head of the queue while their deadline has passed.
-- Only the head is examined, as Redisson does. A head without a deadline is
-- inconsistent state left by a crash between two writes; it is dropped too.
-- Returns the head left (nil when nobody waits). Its first call (LINDEX) is
-- a read, so a queue of another type fails before anything is written; the
-- deadlines are read (ZSCORE) before they are written, and only when
-- somebody waits. A deadline that is not a whole number of epoch ms below
-- 2^53 (inf, say) is refused with NOTALOCK as the second value: before any
-- write, or after the removal of stale heads only (what any client does).
local function purge_stale_heads(queue, deadlines, now)
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return nil
    end
    local score = redis.call('zscore', deadlines, head)
    local deadline = counter(score)
    if score and not deadline then
      return nil, not_a_lock(3, 'a waiter deadline is not a decimal integer below 2^53')
    end
    if deadline and deadline > now then
      return head
    end
    redis.call('zrem', deadlines, head)
    redis.call('lpop', queue)
  end
end

-- Whether the lock hash exists and `owner`'s count in it (nil when it is not
-- a field), from one HGETALL
-- (a read: a key of another type fails here, before anything is written).
-- The hash has one field (its holder) in every state Redisson writes:
-- `OWNER:THREAD` (THREAD decimal) with a positive count, and it always has
-- a TTL. Anything else (application data under the lock's name) is refused
-- as the third value (NOTALOCK), before any write. The TTL is read (PTTL)
-- only when the holder is another owner: this owner's own hold is its own.
local function hold_of(lock, owner)
  local fields = redis.call('hgetall', lock)
  if #fields == 0 then
    return false, nil
  end
  local count = counter(fields[2])
  if #fields ~= 2 or not string.find(fields[1], ':%d+$') or not count or count < 1 then
    return true, nil, not_a_lock(1, 'a Redisson lock hash has one field OWNER:THREAD with a positive integer count')
  end
  if fields[1] == owner then
    return true, count
  end
  if redis.call('pttl', lock) == -1 then
    return true, nil, not_a_lock(1, 'a Redisson lock always has a TTL')
  end
  return true, nil
end

-- Publish the release message to the wake-up channel of the queue head, if any.
local function notify_head(queue, channel_prefix)
  local head = redis.call('lindex', queue, 0)
  if head then
    redis.call('publish', channel_prefix .. ':' .. head, '0')
  end
end

-- The same, when the head is known (nil: nobody waits, nothing to publish).
local function notify(head, channel_prefix)
  if head then
    redis.call('publish', channel_prefix .. ':' .. head, '0')
  end
end

-- Tell the client of every holder of `lock` (fields 'CLIENT:THREAD') that
-- its hold was taken away, on 'PREFIX:CLIENT' (fairlock's channel; Redisson
-- clients do not listen to it). The message only makes a fairlock client
-- check its holds with a call; a forged one costs that call and nothing else.
local function revoke_holders(lock, revoked_prefix)
  for _, holder in ipairs(redis.call('hkeys', lock)) do
    local client = string.match(holder, '^(.*):[^:]*$')
    if client then
      redis.call('publish', revoked_prefix .. client, lock)
    end
  end
end
