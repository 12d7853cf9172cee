-- Election (see election.rs): the leader's writes to the election's log,
-- fenced by its term. The leader is the fair lock's holder and its term the
-- hold's fencing token: a write is made only while the lock key names this
-- owner under this token, so a leader that lost the lock (its lease ran
-- out, a successor took it) writes nothing.
-- KEYS[1] the lock (lock_prelude.lua); KEYS[2] the log: a list, newest
-- first, of at most LOG_LEN entries 'TERM:SEQ:KIND:LABEL<TAB>VALUE' (KIND
-- 'l' leads with VALUE, 'r' resigned; SEQ counts the term's entries from 1)
-- ARGV[1] owner, ARGV[2] term, ARGV[3] what: 'l' publish VALUE, 'r'
-- resign, 't' keep the log alive (and publish VALUE when the log's head is
-- not of this term: its entries were lost, in a failover to a replica that
-- missed them, or evicted); ARGV[4] VALUE; ARGV[5] the log's
-- life in ms; ARGV[6] the channel told of each entry ('TERM:SEQ');
-- ARGV[7] LOG_LEN
-- Returns 1 written, 0 not the holder under that term (nothing written).
local LOG_LEN = tonumber(ARGV[7])
local lock, bad = lock_of(redis.pcall('get', KEYS[1]))
if bad then
  return bad
end
if lock.owner ~= ARGV[1] or lock.text ~= ARGV[2] then
  return 0
end
-- The log is read before any write: another type, or an entry that is not
-- ours, is refused with nothing written. A head of a term above this one
-- is not refused here (after the server clock stepped back, a grant's
-- token may be below the last term's): the readers refuse such a log.
local head = redis.pcall('lindex', KEYS[2], 0)
if type(head) == 'table' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' is not a list')
end
local seq = 1
local what = ARGV[3]
if head then
  local term, last = string.match(head, '^(%d+):(%d+):[lr]:')
  if not counter(term) or not counter(last) then
    return not_a_lock(2, 'the election log holds an entry that is not an election entry')
  end
  if term == ARGV[2] then
    seq = counter(last) + 1
  end
end
if what == 't' and seq == 1 then
  what = 'l'
end
if what ~= 't' then
  local entry = ARGV[2] .. ':' .. decimal(seq) .. ':' .. what .. ':' .. lock.label .. '\t' .. ARGV[4]
  redis.call('lpush', KEYS[2], entry)
  redis.call('ltrim', KEYS[2], 0, LOG_LEN - 1)
  redis.call('publish', ARGV[6], ARGV[2] .. ':' .. decimal(seq))
end
redis.call('pexpire', KEYS[2], ARGV[5])
return 1
