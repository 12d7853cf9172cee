-- fairlock prelude, prepended to every redisson-protocol script.

-- Drop queued owners from the head of the queue while their deadline has passed.
-- Only the head is examined, as Redisson does. A head without a deadline is
-- inconsistent state left by a crash between two writes; it is dropped too.
-- Returns the head left (nil when nobody waits). Its first call (LINDEX) is
-- a read, so a queue of another type fails before anything is written; the
-- deadlines are read (ZSCORE) before they are written, and only when
-- somebody waits.
local function purge_stale_heads(queue, deadlines, now)
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return nil
    end
    local deadline = tonumber(redis.call('zscore', deadlines, head))
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
-- The hash has one field (its holder) in every state Redisson writes.
local function hold_of(lock, owner)
  local fields = redis.call('hgetall', lock)
  for i = 1, #fields, 2 do
    if fields[i] == owner then
      return true, tonumber(fields[i + 1]) or 0
    end
  end
  return #fields > 0, nil
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
