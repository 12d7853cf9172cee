-- fairlock native weighted engine: the helpers of the administrative
-- scripts (inspect, force-release) of the read-write lock and the
-- semaphore, after the object's prelude. Prepended to those scripts only:
-- every function a script defines costs its every call (EVALSHA runs the
-- whole chunk again), and acquire and release need none of these.

-- Tell the client of holder `id` that its hold was taken away (see revoke
-- in lock_prelude.lua): the message names KEYS[1], the key every hold of
-- the object is registered under.
local function revoke_holder(revoked_prefix, id)
  local owner = string.gsub(id, ':write$', '')
  local client = string.match(owner, '^(.*):[^:]*$')
  if client then
    redis.call('publish', revoked_prefix .. client, KEYS[1])
  end
end

-- The object's whole state for inspect (read-only; O(N) in holders and
-- waiters): {holders as a flat list [id, hold[field], token, pttl, ...]
-- (those whose hold key lives), the line's ids in order, [id, liveness
-- deadline ms, ...], server now ms, [client, label, ...] (the holders' and
-- the waiters' labels, each client id once)}, the records read (by id),
-- or nil and NOTALOCK when a hold key holds anything but a hold. `field`:
-- 'count' (the read-write lock) or 'weight' (the semaphore).
local function inspect_state(field)
  local labels, seen = {}, {}
  local function label_of(id, label)
    local client = string.match((string.gsub(id, ':write$', '')), '^(.*):[^:]*$')
    if client and label and label ~= '' and not seen[client] then
      seen[client] = true
      labels[#labels + 1] = client
      labels[#labels + 1] = label
    end
  end
  local holders = {}
  for _, id in ipairs(redis.call('zrange', KEYS[1], 0, -1)) do
    local hold, bad = hold_of(id)
    if bad then
      return nil, bad
    end
    if hold.owner then
      holders[#holders + 1] = id
      holders[#holders + 1] = hold[field]
      holders[#holders + 1] = hold.token
      holders[#holders + 1] = redis.call('pttl', hold_key(id))
      label_of(id, hold.label)
    end
  end
  local line = redis.call('zrange', KEYS[2], 0, -1)
  local deadlines, records = {}, {}
  for _, id in ipairs(line) do
    local record = record_of(redis.call('hget', KEYS[3], id))
    records[id] = record
    deadlines[#deadlines + 1] = id
    deadlines[#deadlines + 1] = record and decimal(record.deadline) or '0'
    if record then
      local _, label = weight_of(record)
      label_of(id, label)
    end
  end
  return {holders, line, deadlines, server_now(), labels}, nil, records
end

-- Force-release: drop every hold whose id `which` selects, each revoked
-- on its client's channel (`revoked_prefix`), then admit who fits. Every
-- hold key is read before anything is written: one that is not a hold is
-- refused (returned as the error), and nothing is deleted. A hold whose
-- key is not on this node while the holders set says its lease runs (on
-- the other node half-way through a slot migration; or evicted, deleted)
-- is dropped as a live one: its holder is told (it may still act on it,
-- and with an explicit lease nothing else would tell it) and it is
-- counted, with the weight meta recorded for it. Returns the number of
-- holds removed (whose keys lived, or whose lease ran) and the sum of
-- their weights (0 for an object without weights), or nil and NOTALOCK.
local function force_release(which, revoked_prefix, channel_prefix, default_ttl)
  local ids = {}
  local now = server_now()
  local entries = redis.call('zrange', KEYS[1], 0, -1, 'withscores')
  for i = 1, #entries, 2 do
    local id = entries[i]
    if which(id) then
      local hold, bad = hold_of(id)
      if bad then
        return nil, bad
      end
      local live = hold.owner ~= nil or tonumber(entries[i + 1]) > now
      ids[#ids + 1] = {id, live, hold.weight}
    end
  end
  local removed, weights = 0, 0
  for _, entry in ipairs(ids) do
    local weight = drop_hold(entry[1], entry[3])
    if entry[2] then
      revoke_holder(revoked_prefix, entry[1])
      removed = removed + 1
      weights = weights + weight
    end
  end
  after_release(channel_prefix)
  return removed, nil, weights
end
