-- Native locks: for every hold in the batch still held by its owner under
-- its token, extend the lease (and mark a handed-over grant claimed), or
-- only check it.
-- KEYS[i] (i <= N) the lock key (a lock's string, layout version 2; a
-- read-write lock's or semaphore's holders set), KEYS[N + i] the same key
-- again (optional: all or none; a lock keeps its holder's label in its
-- value, a weighted hold in its hold key, and none writes a labels key any
-- more); ARGV[1] lease ms, or '' to check
-- without extending; ARGV[2] this
-- client's label ('' for none); ARGV[2i + 1] owner and ARGV[2i + 2] token
-- ('' for any) of KEYS[i]; N = (#ARGV - 2) / 2
-- Returns one integer per lock: 1 held (renewed); lost: 0 the key is gone,
-- 2 another owner or token holds it (or the key holds another type); 3
-- unsure: a weighted hold whose key is not on this node while the holders
-- set says its lease has not ended (half-way through a Cluster slot
-- migration, the key still on the other node): neither renewed nor lost,
-- the caller tries again (and believes it no longer than it was confirmed).
local lease, label = ARGV[1], ARGV[2]
-- Server ms, read once and only for a weighted hold.
local now
local function server_ms()
  if not now then
    local t = redis.call('time')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local renewed = {}
local n = (#ARGV - 2) / 2

-- A lock's hold (layout version 2, see lock_prelude.lua): its key is a
-- string naming the owner and the token. Claimed (u cleared) and extended.
local function renew_lock(key, owner, token)
  -- pcall: a key of another type (the older layout's hash, say) is not ours.
  local raw = redis.pcall('get', key)
  if raw == false then
    return 0
  end
  if type(raw) ~= 'string' then
    -- Another type (the older layout's hash, say): not ours. Any other
    -- error (in a Cluster slot migrating away, a key already moved is
    -- refused to a script): the batch is sent where the slot went.
    if not string.find(raw.err or '', 'WRONGTYPE', 1, true) then
      redis.call('get', key)
    end
    return 2
  end
  local text, count, flags, nonce, request, holder, held_label = string.match(raw, PATTERN)
  if count == '0' then
    -- Free (the marker of a release): the hold is gone.
    return 0
  end
  if not text or holder ~= owner or (token ~= '' and text ~= token) then
    return 2
  end
  if lease ~= '' then
    -- Claimed (a handed-over grant confirmed), and the holder's label as
    -- this client has it now.
    if flagged(flags, 'u') or (label ~= '' and held_label ~= label) then
      redis.call('set', key, held_value(text, count, with_flags(flags, '', 'u'), nonce, request, holder,
        label ~= '' and label or held_label), 'keepttl')
    end
    -- GT: a renewal never shortens what a longer hold of the same owner
    -- (a re-entry with a longer explicit lease) was given.
    redis.call('pexpire', key, lease, 'gt')
  end
  return 1
end

for i = 1, n do
  local key = KEYS[i]
  local owner, token = ARGV[2 * i + 1], ARGV[2 * i + 2]
  -- A hold of the weighted engine (a read-write lock's or a semaphore's,
  -- weighted_prelude.lua): named by the holders set, kept in its own key,
  -- which the set and the meta hash (a semaphore's capacity and weights)
  -- must outlive.
  local holders
  if string.sub(key, -11) == ':rw:holders' or string.sub(key, -12) == ':sem:holders' then
    holders = key
    key = string.sub(key, 1, -8) .. 'hold:' .. owner
  end
  if not holders then
    renewed[i] = renew_lock(key, owner, token)
  else
    -- pcall: a key of another type means the hold is not ours.
    local fields = redis.pcall('hmget', key, 'owner', 'token')
    -- Any other error on a hold key: not readable on this node (in a Cluster
    -- slot migrating away, a key already moved is refused to a script).
    local unreadable = fields.err and not string.find(fields.err, 'WRONGTYPE', 1, true)
    local ours = type(fields) == 'table' and fields[1] == owner and (token == '' or fields[2] == token)
    local score = redis.pcall('zscore', holders, owner)
    if unreadable then
      renewed[i] = 3
    elseif ours and type(score) ~= 'string' then
      -- The hold's key without its entry in the holders set (the set evicted
      -- or deleted): no script counts it any more and a writer may be in,
      -- so it is gone, as a lock whose key went.
      renewed[i] = 0
    elseif ours then
      if lease ~= '' then
        -- Claimed (a handed-over grant confirmed), and the holder's label
        -- as this client has it now.
        if label ~= '' then
          redis.call('hset', key, 'claimed', '1', 'label', label)
        else
          redis.call('hset', key, 'claimed', '1')
        end
        -- GT: a renewal never shortens what a longer hold of the same owner
        -- (a re-entry with a longer explicit lease) was given.
        redis.call('pexpire', key, lease, 'gt')
        -- The score follows the key's lease (GT, as the key's), so that a
        -- live holder that renews is never due in reclaim(), which would
        -- otherwise read its key, and half-way through a slot migration
        -- the key may not be there yet.
        redis.call('zadd', holders, 'xx', 'gt', server_ms() + tonumber(lease), owner)
        redis.call('pexpire', holders, lease, 'gt')
        redis.call('pexpire', string.sub(holders, 1, -8) .. 'meta', tonumber(lease) + 20000, 'gt')
      end
      renewed[i] = 1
    elseif type(fields) == 'table' and not fields[1] and redis.call('exists', key) == 0 then
      if type(score) == 'string' and tonumber(score) > server_ms() then
        renewed[i] = 3
      else
        renewed[i] = 0
      end
    else
      renewed[i] = 2
    end
  end
end
return renewed
