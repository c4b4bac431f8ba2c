/**
 * The Lua scripts that keep Redis state consistent: each runs atomically, so a subscription's
 * stored form and its command in `{p}in` never disagree, and a notification's id, dedupe marker,
 * trim and counters change together. Registered with ioredis `defineCommand` (EVALSHA, falling back
 * to EVAL once per connection), usable on a connection and in a pipeline.
 *
 * Ids are compared as two numbers (ms, seq); both are below 2^53 so Lua's doubles hold them.
 * Numbers are written back with '%.0f' because Lua's tostring would print 1.7e+12.
 */
import type { ChainableCommander } from 'ioredis';
import type { Conn } from './connection.js';
import { GEO_LOC, GEO_MAP, GEO_MOVE, GEO_PUB, GEO_PURGE, GEO_SUB, GEO_UNSUB } from './geo-scripts.js';
import { FENCE, PARSE_ID, STATE } from './lua-parts.js';
import { OWE, OWE_CLOSE } from './owed-scripts.js';



/**
 * A new leader's fence on a device group (cluster layout, where a group's keys cannot see the
 * epoch): raised to the leader's token before it writes there, so an older leader's deliveries to
 * the group are refused from then on. KEYS: the group's fence. ARGV: token.
 * Returns 1, or fails FENCED when a newer leader has raised it already.
 */
const FENCE_RAISE = `
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) > tonumber(ARGV[1]) then
  return redis.error_reply('FENCED device group fence is ' .. cur .. ', this matcher holds ' .. ARGV[1])
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`;

/**
 * Take the matcher lease if nobody holds it: the new token is INCR of the epoch.
 * KEYS: lease, epoch. ARGV: matcher id, lease ms.
 * Returns {1, token} when taken, {0, "<token> <matcher id>" of the holder} otherwise.
 */
const LEASE_ACQUIRE = `
local cur = redis.call('GET', KEYS[1])
if cur then return {0, cur} end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ' ' .. ARGV[1], 'PX', ARGV[2])
return {1, tostring(token)}
`;

/**
 * Extend the lease if this holder still has it. KEYS: lease. ARGV: "<token> <matcher id>", lease ms.
 * Returns 1, or 0 when the lease is gone or someone else's.
 */
const LEASE_RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/** Give the lease up if this holder still has it. KEYS: lease. ARGV: "<token> <matcher id>". */
const LEASE_RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`;

/**
 * The leader's stats record, written only while its token is still the epoch: a leader paused past
 * its lease would otherwise put its record over the new leader's until it stands down. Returns 0
 * then (no error: the record is advisory). KEYS: stats, epoch. ARGV: token ('' writes), record,
 * time to live ms.
 */
const STATS = `
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`;

/**
 * The leader's offset, fenced. KEYS: offset, epoch. ARGV: token, last applied in-entry id.
 */
const COMMIT = `${FENCE}
check_fence(KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
`;

/**
 * Trimming `{p}in` by progress. Each matcher says what it still needs of its stream (its read
 * position; its snapshot file's start, which a restart reads from) and for how long; the leader
 * also trims the stream below the oldest of those and of the stored offsets that hold it back, so
 * the stream stays short while matchers keep up and nobody loses what it still has to read. (The
 * gateways' count cap stays as a safety bound on memory.) A record not renewed in time (a matcher
 * that died) stops holding the stream.
 * KEYS: keep, in, then per partition whose offset holds this stream, this one's first: its
 * offset, its in (sharded by space: every shard, since a shard replaying a hand-over reads the
 * paired entry in the stream the device went to; a shard that has read all its stream holds nothing). ARGV: now ms ('' = Redis's clock), trim ('1'|'0'), how long
 * (ms) a matcher's read position may stay put behind the stored offset and still hold the
 * stream (0: no bound), then per record: field, stream id ('' removes it), ms to hold it.
 * Returns {the id the stream was trimmed below, or '' when it was not trimmed; entries removed;
 * what holds it there (a record's field or an offset's key; '' when unknown); entries left}.
 */
const KEEP = `${PARSE_ID}
local now = now_ms(ARGV[1])
local stuck = tonumber(ARGV[3])
-- A record is "<id> <held until ms> <since ms>": since when (Redis's clock, or the given one) its
-- id has been the same.
for i = 4, #ARGV, 3 do
  if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[1], ARGV[i])
  else
    local since = now
    local old = redis.call('HGET', KEYS[1], ARGV[i])
    if old then
      local oid, _, osince = string.match(old, '^(%S+) (%d+) (%d+)$')
      if oid == ARGV[i + 1] then since = tonumber(osince) end
    end
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. ' ' .. string.format('%.0f', now + tonumber(ARGV[i + 2])) .. ' ' .. string.format('%.0f', since))
  end
end
if ARGV[2] ~= '1' then return {'', 0} end
local fm, fs, holder = nil, nil, ''
-- The stored offset: a matcher whose read position has stayed put behind it for more than
-- stuck ms is not waited for (trimmed past, it rebuilds itself from Redis).
local ref = nil
local function lower(id, who)
  local m, s = parse_id(id)
  if m == nil then return false end
  if fm == nil or m < fm or (m == fm and s < fs) then fm, fs, holder = m, s, who end
  return true
end
for k = 3, #KEYS, 2 do
  local o = redis.call('GET', KEYS[k])
  if o then
    if k == 3 then
      if not lower(o, KEYS[k]) then return {'', 0} end
      ref = parse_id(o)
    else
      -- Another shard replays only what its stream holds after its offset: one that has read
      -- everything it has holds nothing here.
      local last = redis.call('XREVRANGE', KEYS[k + 1], '+', '-', 'COUNT', 1)[1]
      if last then
        local om, os = parse_id(o)
        local lm, ls = parse_id(last[1])
        if om == nil then return {'', 0} end
        if lm > om or (lm == om and ls > os) then lower(o, KEYS[k]) end
      end
    end
  elseif redis.call('XLEN', KEYS[k + 1]) > 0 then
    -- A partition with commands but no stored offset yet: what it will read is unknown.
    return {'', 0}
  end
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local id, until_ms, since = string.match(all[i + 1], '^(%S+) (%d+) ?(%d*)$')
  local behind = false
  if until_ms ~= nil and stuck > 0 and ref ~= nil and since ~= '' and id ~= '0-0' and string.sub(all[i], -5) == ':read' and now - tonumber(since) > stuck then
    local m = parse_id(id)
    behind = m ~= nil and m < ref
  end
  if until_ms == nil or tonumber(until_ms) < now then redis.call('HDEL', KEYS[1], all[i])
  elseif behind then -- stuck behind the offset: trimming does not wait for it
  elseif not lower(id, all[i]) then return {'', 0} end
end
if fm == nil or fm == 0 then return {'', 0, holder, redis.call('XLEN', KEYS[2])} end
local below = string.format('%.0f', fm) .. '-' .. string.format('%.0f', fs)
local removed = redis.call('XTRIM', KEYS[2], 'MINID', '~', below)
return {below, removed, holder, redis.call('XLEN', KEYS[2])}
`;

/**
 * A batch's answers, fenced: the counters, the ids of its fresh events (each remembered with its
 * reach and in-entry id for the dedupe window), then each publisher's reply.
 * Replies go out with PUBLISH (SPUBLISH on a cluster).
 * KEYS: stats, epoch, then eid:{id} of each fresh event. ARGV: token, events matched, duplicates,
 * window ms, then per fresh event "<reached> <in-entry id>", then channel, reply, channel, reply, ...
 * (sharded by space: the window is "geo:s<shard>", the keys are the deployment's event records
 * and the values this shard's reach of each and the publish's entry, "<reach> <entry>").
 */
const ANSWER = `${FENCE}
check_fence(KEYS[2], ARGV[1])
local events = tonumber(ARGV[2])
local dups = tonumber(ARGV[3])
if events > 0 then redis.call('HINCRBY', KEYS[1], 'events', events) end
if dups > 0 then redis.call('HINCRBY', KEYS[1], 'duplicates', dups) end
local n = #KEYS - 2
-- Sharded by space the window argument is "geo:<field>": each event's record (a hash the publish
-- script made) takes this shard's reach under the field while the record is the one of this
-- publish: the value is "<reach> <entry>", and the record's e names the publish's entry (a record
-- a later publish of the id made, once this one's lapsed, is left alone).
local field = string.match(ARGV[4], '^geo:(.+)$')
for i = 1, n do
  if field then
    local reach, entry = string.match(ARGV[4 + i], '^(%S+) (%S+)$')
    if reach then
      if redis.call('HGET', KEYS[2 + i], 'e') == entry then redis.call('HSET', KEYS[2 + i], field, reach) end
    elseif redis.call('EXISTS', KEYS[2 + i]) == 1 then
      -- A matcher of an earlier version: the reach alone.
      redis.call('HSET', KEYS[2 + i], field, ARGV[4 + i])
    end
  else
    redis.call('SET', KEYS[2 + i], ARGV[4 + i], 'PX', ARGV[4])
  end
end
for i = 5 + n, #ARGV - 1, 2 do redis.call('$PUBLISH', ARGV[i], ARGV[i + 1]) end
return 1
`;

/**
 * Add or replace one subscription and queue its command.
 * KEYS: subs:{device}, in, subdevs. ARGV: mode ('add'|'replace'), device, subscription id, JSON, cap, in maxlen.
 * Returns the `in` entry id, or ALREADY_EXISTS / NOT_FOUND / RESOURCE_EXHAUSTED.
 */
const SUB = `
local exists = redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1
if ARGV[1] == 'add' then
  if exists then return 'ALREADY_EXISTS' end
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then return 'RESOURCE_EXHAUSTED' end
elseif not exists then
  return 'NOT_FOUND'
end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 't', 'sub', 'dev', ARGV[2], 'sub', ARGV[4])
redis.call('HSET', KEYS[1], ARGV[3], id .. ' ' .. ARGV[4])
redis.call('SADD', KEYS[3], ARGV[2])
return id
`;

/**
 * Remove one subscription and queue its command.
 * KEYS: subs:{device}, in, subdevs. ARGV: device, subscription id, in maxlen. Returns the entry id or NOT_FOUND.
 */
const UNSUB = `
if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then return 'NOT_FOUND' end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[3], ARGV[1]) end
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 't', 'unsub', 'dev', ARGV[1], 'id', ARGV[2])
`;

/**
 * Revoke tokens: each revocation is kept as "<until s> <issued up to s, or - for one token>" under
 * its key ("id:<token id>" or "sub:<subject>"), the later of what was there and what is asked;
 * then the gateways are told on the revocations channel.
 * KEYS: revoked. ARGV: channel, the most kept, then per revocation: key, until s, issued up to s or '-'.
 * Returns the number kept, or RESOURCE_EXHAUSTED (nothing written).
 */
const REVOKE = `
local n = (#ARGV - 2) / 3
local fresh = 0
for i = 0, n - 1 do
  if redis.call('HEXISTS', KEYS[1], ARGV[3 + 3 * i]) == 0 then fresh = fresh + 1 end
end
if redis.call('HLEN', KEYS[1]) + fresh > tonumber(ARGV[2]) then return 'RESOURCE_EXHAUSTED' end
for i = 0, n - 1 do
  local k, u, up = ARGV[3 + 3 * i], tonumber(ARGV[4 + 3 * i]), ARGV[5 + 3 * i]
  local had = redis.call('HGET', KEYS[1], k)
  if had then
    local hu, hup = string.match(had, '^(%S+) (%S+)$')
    if tonumber(hu) > u then u = tonumber(hu) end
    if up ~= '-' and hup ~= '-' and tonumber(hup) > tonumber(up) then up = hup end
  end
  redis.call('HSET', KEYS[1], k, string.format('%.0f', u) .. ' ' .. up)
end
redis.call('$PUBLISH', ARGV[1], 'changed')
return redis.call('HLEN', KEYS[1])
`;

/** What a doorbell says when the device's state was purged (never the start of a notification). */
export const PURGED_DOORBELL = 'purged';

/**
 * Purge a device from the matcher's scope and queue its command: its subscriptions, its place in
 * subdevs, its position and its last-seen record go; the matcher then forgets it and drops its
 * notifications (DROP). With a time in ARGV[3], only if the device was last seen before it
 * (expiry: a device seen since is kept).
 * KEYS: subs:{device}, in, subdevs, pos, seen, stats. ARGV: device, in maxlen, seen-before ms or
 * '', the counter to add one to (devicesPurged or devicesExpired) if the device held anything.
 * Returns {subscriptions removed, 1 if it had a position}, or SEEN.
 */
const PURGE = `
if ARGV[3] ~= '' then
  -- Expiry: only a device still unseen (one with no record was purged meanwhile, or is back).
  local at = redis.call('ZSCORE', KEYS[5], ARGV[1])
  if not at or tonumber(at) >= tonumber(ARGV[3]) then return 'SEEN' end
end
local n = redis.call('HLEN', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[3], ARGV[1])
local had = redis.call('HDEL', KEYS[4], ARGV[1])
local was_seen = redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 't', 'purge', 'dev', ARGV[1])
if n > 0 or had > 0 or was_seen > 0 then redis.call('HINCRBY', KEYS[6], ARGV[4], 1) end
return {n, had}
`;

/**
 * The matcher drops a purged device's notifications, after those it stored before (fenced): its
 * stream, delivery state and ack point, and rings its doorbell with PURGED_DOORBELL so open inboxes
 * end. born:{device} records the purge's command id (kept BORN_TTL_MS): it names the device's new
 * state (OPEN), and a replay of the same command (a new leader reading it again), or the drop of an
 * earlier purge that comes after a later one's, changes nothing.
 * Sharded by space the drop can come late: the purge is queued on the shard the device was homed
 * on, and a shard it came to since may have stored notifications of later commands (all shards
 * draw their ids from one sequence) before that shard reads the purge. Those stay, with the state
 * that counts them and marks them stored (a replay stores them once); only what came from entries
 * before the purge goes, and an owed window in that state owes nothing from before it.
 * KEYS: n:{device}, dstate, nseq, nlast, acked, fence, born:{device}. ARGV: device, wake channel,
 * token, the purge command's id. Returns the notifications dropped.
 */
const DROP = `${PARSE_ID}${STATE}${FENCE}
check_fence(KEYS[6], ARGV[3])
local pm, ps = parse_id(ARGV[4])
local born = redis.call('GET', KEYS[7])
if born then
  -- Command ids only grow (born is kept 90 days), so a purge at or before born was dropped already.
  local bm, bs = parse_id(born)
  if bm and not is_after(pm, ps, 0, bm, bs, 0) then return 0 end
end
redis.call('SET', KEYS[7], ARGV[4], 'PX', ${90 * 86_400_000})
local raw = redis.call('HGET', KEYS[2], ARGV[1])
local s = nil
if raw then s = load_state(raw) end
-- Stored anything from an entry after the purge: its marker is past it (a store within an owed
-- window is of a source the marker had passed already).
local keep = s ~= nil and is_after(s[5], s[6], s[7], pm, ps, 1e15)
local n = 0
if keep then
  local entries = redis.call('XRANGE', KEYS[1], '-', '+')
  for i = 1, #entries do
    local f = entries[i][2]
    for j = 1, #f, 2 do
      if f[j] == 'r' then
        local m, q = string.match(f[j + 1], '^(%d+)%-(%d+)')
        m, q = tonumber(m), tonumber(q)
        if m and (m < pm or (m == pm and q < ps)) then
          redis.call('XDEL', KEYS[1], entries[i][1])
          n = n + 1
        end
        break
      end
    end
  end
  s[3] = redis.call('XLEN', KEYS[1])
  for w = 0, windows(s) - 1 do
    local b = 7 + 8 * w
    if is_after(pm, ps, 1e15, s[b + 6], s[b + 7], s[b + 8]) then s[b + 6], s[b + 7], s[b + 8] = pm, ps, 1e15 end
  end
  redis.call('HSET', KEYS[2], ARGV[1], pack_state(s))
else
  n = redis.call('XLEN', KEYS[1])
  redis.call('DEL', KEYS[1])
  -- Owed windows of hand-overs after the purge, nothing stored past the purge yet: the state
  -- starts over from the purge, and each such window still takes what its shard owes from after it.
  local t = {0, 0, 0, 0, pm, ps, 1e15}
  if s ~= nil then
    for w = 0, windows(s) - 1 do
      local b = 7 + 8 * w
      if s[b + 4] > pm or (s[b + 4] == pm and s[b + 5] > ps) then
        local k = #t
        t[k + 1], t[k + 2], t[k + 3], t[k + 4], t[k + 5], t[k + 6], t[k + 7], t[k + 8] = s[b + 1], s[b + 2], s[b + 3], s[b + 4], s[b + 5], pm, ps, 1e15
      end
    end
  end
  if t[8] ~= nil then
    redis.call('HSET', KEYS[2], ARGV[1], pack_state(t))
  else
    -- The state goes; born:{device} keeps the purge's id, so DELIVER stores nothing from before it.
    redis.call('HDEL', KEYS[2], ARGV[1])
  end
  redis.call('HDEL', KEYS[5], ARGV[1])
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('$PUBLISH', ARGV[2], '${PURGED_DOORBELL}')
return n
`;


/**
 * Store notifications: one call for a group of recipients across events (up to a few hundred), at
 * most once per device and (in-entry, event index): the matcher replays entries after a crash, and
 * the marker in the device's state makes the replay a no-op for a device that already has it.
 * Per recipient: XADD (trimming by age), XLEN, PUBLISH (SPUBLISH on a cluster); the states are read with one HMGET and
 * written with one HSET, the clock read and the counters added once per call. A device's stream
 * TTL is refreshed when an eighth of the max age has passed since it was last set, to 1.25 × the
 * max age: a stream lives at least max age after its last notification. Each notification is
 * published on the device's doorbell channel whole ("<id>\n<published ms>\n<subscription ids
 * JSON>\n<event JSON>"), so a gateway with the device's stream open delivers it without a read.
 * The stored entry names its event ('r' = "<in-entry id>:<event index>", the matcher stores the
 * event's JSON once under {p}ev:<ref> before the call) instead of holding it: an event's bytes are
 * kept once, not once per recipient.
 * KEYS: dstate, stats, nseq, nlast (the last two read only for devices without a state), then
 *       n:{device} of each recipient, then born:{device} of each (read only for devices without
 *       a state: a purged device stores nothing from before its purge), then the lease epoch
 *       (fencing, see FENCE).
 * ARGV: max per device, max age ms, doorbell channel prefix, now ms ('' = Redis's clock), event
 *       count E, then per event: source in-entry id, event index, published ms, event JSON; then
 *       per recipient: device, its event's number (1..E), subscription ids JSON, then the caller's
 *       fencing token. A device's events come in (in-entry, index) order.
 * Returns how many notifications were stored (a device that already has one is skipped).
 */
const DELIVER = `${PARSE_ID}${STATE}${FENCE}
check_fence(KEYS[#KEYS], ARGV[#ARGV])
local max_len = tonumber(ARGV[1])
local max_age = tonumber(ARGV[2])
local wake = ARGV[3]
local now = now_ms(ARGV[4])
local minid = string.format('%.0f', now - max_age)
local refresh = now - math.floor(max_age / 8)
local ttl = max_age + math.floor(max_age / 4)
local nev = tonumber(ARGV[5])
local esm, ess, eidx, epub = {}, {}, {}, {}
for e = 1, nev do
  local b = 2 + 4 * e
  esm[e], ess[e] = parse_id(ARGV[b])
  eidx[e] = tonumber(ARGV[b + 1])
  epub[e] = tonumber(ARGV[b + 2])
end
local base = 6 + 4 * nev
local n = (#KEYS - 5) / 2
local devs = {}
for i = 1, n do devs[i] = ARGV[base + 3 * (i - 1)] end
local raws = redis.call('HMGET', KEYS[1], unpack(devs))
local missing, missingBorn = {}, {}
for i = 1, n do
  if not raws[i] then
    missing[#missing + 1] = devs[i]
    missingBorn[#missingBorn + 1] = KEYS[4 + n + i]
  end
end
local seqs, lasts, borns = {}, {}, {}
if #missing > 0 then
  local a = redis.call('HMGET', KEYS[3], unpack(missing))
  local b = redis.call('HMGET', KEYS[4], unpack(missing))
  local c = redis.call('MGET', unpack(missingBorn))
  for m = 1, #missing do seqs[missing[m]] = a[m]; lasts[missing[m]] = b[m]; borns[missing[m]] = c[m] end
end
local cur, changed = {}, {}
local stored, dropped = 0, 0
-- The changed states, written with one HSET, and the counters.
local function save_states()
  if #changed > 0 then
    local out = {}
    for c = 1, #changed do
      out[2 * c - 1] = changed[c]
      out[2 * c] = pack_state(cur[changed[c]])
    end
    redis.call('HSET', KEYS[1], unpack(out))
  end
  if stored > 0 then redis.call('HINCRBY', KEYS[2], 'notifications', stored) end
  if dropped > 0 then redis.call('HINCRBY', KEYS[2], 'dropped', dropped) end
end
for i = 1, n do
  local dev = devs[i]
  local j = base + 3 * (i - 1)
  local e = tonumber(ARGV[j + 1])
  local s = cur[dev]
  if not s then
    s = load_state(raws[i], seqs[dev], lasts[dev])
    -- A device purged (DROP) since its state was written: nothing from before the purge (a replay
    -- across it, or what a shard it left still owed it) is stored in its new state.
    local born = borns[dev]
    if born then
      local bm, bs = parse_id(born)
      if bm and is_after(bm, bs, 1e15, s[5], s[6], s[7]) then s[5], s[6], s[7] = bm, bs, 1e15 end
    end
    cur[dev] = s
  end
  local sm, ss, si = esm[e], ess[e], eidx[e]
  local fresh = is_after(sm, ss, si, s[5], s[6], s[7])
  -- Owed by a shard a device left before the arriving shard stopped waiting for it: within a
  -- window and after what was stored in it (a replay of that shard skips what it stored already,
  -- owed or fresh: a window's marker follows every store within its range).
  local inwin = some_window_takes(s, sm, ss, si)
  if fresh or inwin then
    local key = KEYS[4 + i]
    local ms = math.max(epub[e], s[1])
    local ord = s[2] + 1
    local id = string.format('%.0f-%.0f', ms, ord)
    local b = 2 + 4 * e
    local added = redis.pcall('XADD', key, 'MINID', minid, id, 'r', ARGV[b] .. ':' .. ARGV[b + 1], 's', ARGV[j + 2], 'p', ARGV[b + 2])
    if type(added) == 'table' and added.err then
      -- Keep what was stored so far consistent with the states (a replay then skips it), then fail.
      save_states()
      return redis.error_reply(added.err)
    end
    local after = redis.call('XLEN', key)
    if after > max_len then
      redis.call('XTRIM', key, 'MAXLEN', max_len)
      after = max_len
    end
    dropped = dropped + math.max(0, s[3] + 1 - after)
    if s[4] < refresh or after == 1 then
      redis.call('PEXPIRE', key, ttl)
      s[4] = now
    end
    s[1], s[2], s[3] = ms, ord, after
    if fresh then s[5], s[6], s[7] = sm, ss, si end
    if inwin then follow_windows(s, sm, ss, si) end
    if not changed[dev] then
      changed[dev] = true
      changed[#changed + 1] = dev
    end
    -- One older than the max age was trimmed at once (a late replay): stored and dropped, not sent.
    if ms >= now - max_age then
      redis.call('$PUBLISH', wake .. dev, id .. '\\n' .. ARGV[b + 2] .. '\\n' .. ARGV[j + 2] .. '\\n' .. ARGV[b + 3])
    end
    stored = stored + 1
  end
end
save_states()
return stored
`;

/**
 * What an inbox needs to open, read in one step: the resume point, the last ordinal and the
 * oldest retained id, after dropping (and counting) what is older than the matcher's max age,
 * the whole stream included when it expired.
 * KEYS: n:{device}, dstate, acked, stats, config, nseq, nlast (the last two: a device without a
 * state, from earlier versions), born:{device}. ARGV: device, 'acked' | 'token', token, now ms
 * ('' = Redis's clock).
 * Returns { start, last ordinal, oldest retained id or '', born:{device} or '' }: the last purge
 * of the device (DROP), so a new one means its state started empty.
 */
const OPEN = `${PARSE_ID}${STATE}
local start = ARGV[3]
if ARGV[2] == 'acked' then start = redis.call('HGET', KEYS[3], ARGV[1]) or '' end
local raw = redis.call('HGET', KEYS[2], ARGV[1])
local s = nil
if raw then s = load_state(raw)
else
  local seq = redis.call('HGET', KEYS[6], ARGV[1])
  local last = redis.call('HGET', KEYS[7], ARGV[1])
  if seq or last then s = load_state(nil, seq, last) end
end
local max_age = tonumber(redis.call('HGET', KEYS[5], 'maxAgeMs') or '0')
local dropped = 0
if max_age > 0 then dropped = redis.call('XTRIM', KEYS[1], 'MINID', string.format('%.0f', now_ms(ARGV[4]) - max_age)) end
local seq = 0
if s then
  seq = s[2]
  local len = redis.call('XLEN', KEYS[1])
  if len == 0 and dropped == 0 then dropped = s[3] end
  if len ~= s[3] or not raw then
    s[3] = len
    redis.call('HSET', KEYS[2], ARGV[1], pack_state(s))
  end
end
if dropped > 0 then redis.call('HINCRBY', KEYS[4], 'dropped', dropped) end
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local oldest = ''
if #first > 0 then oldest = first[1][1] end
return {start, string.format('%.0f', seq), oldest, redis.call('GET', KEYS[8]) or ''}
`;

/**
 * Moves devices' ack points forward only, for a group of acks in one call.
 * KEYS: acked. ARGV: device, delivery id, device, delivery id, ... (each device once).
 * Returns how many ack points moved.
 */
const ACKS = `${PARSE_ID}
local n = #ARGV / 2
local devs = {}
for i = 1, n do devs[i] = ARGV[2 * i - 1] end
local cur = redis.call('HMGET', KEYS[1], unpack(devs))
local out = {}
for i = 1, n do
  local id = ARGV[2 * i]
  local move = true
  if cur[i] then
    local cm, cs = parse_id(cur[i])
    local nm, ns = parse_id(id)
    move = nm > cm or (nm == cm and ns > cs)
  end
  if move then
    out[#out + 1] = devs[i]
    out[#out + 1] = id
  end
end
if #out > 0 then redis.call('HSET', KEYS[1], unpack(out)) end
return #out / 2
`;

/**
 * A token bucket shared by the gateways (rate limits). KEYS: the bucket (a hash: tokens, at).
 * ARGV: tokens per ms, capacity, n. On Redis's clock. Takes n when the bucket holds min(n,
 * capacity) (a larger request leaves it in debt) and returns 0; else the ms until it would hold
 * them. The key expires once it would be full again (a full bucket is the same as none).
 */
const QUOTA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tk', 'at')
local tokens = tonumber(b[1]) or cap
local at = tonumber(b[2]) or now
if now > at then tokens = math.min(cap, tokens + (now - at) * rate) else now = at end
local need = math.min(n, cap)
if tokens < need then
  redis.call('HSET', KEYS[1], 'tk', tostring(tokens), 'at', string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[1], math.ceil((cap - tokens) / rate) + 1000)
  return math.max(1, math.ceil((need - tokens) / rate))
end
tokens = tokens - n
redis.call('HSET', KEYS[1], 'tk', tostring(tokens), 'at', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((cap - tokens) / rate) + 1000)
return 0
`;

/** A script that publishes, with PUBLISH (plain Redis) or SPUBLISH (a shard channel on a cluster). */
const publishing = (lua: string, cmd: 'PUBLISH' | 'SPUBLISH') => lua.replaceAll('$PUBLISH', cmd);

/**
 * A process's record in `{p}procs` (presence.ts). KEYS: procs. ARGV: the process's field, its protocol, the record's life (ms), 'join' | 'beat' |
 * 'leave', now ms ('' = Redis's clock). Lapsed records are removed. 'join' writes the record unless
 * a live process speaks another protocol; 'beat' writes it either way. Returns the first such
 * process's field and protocol, or an empty list.
 */
const PRESENCE = `${PARSE_ID}
if ARGV[4] == 'leave' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {}
end
local now = now_ms(ARGV[5])
local all = redis.call('HGETALL', KEYS[1])
local other = nil
for i = 1, #all, 2 do
  local p, exp = string.match(all[i + 1], '^(%d+) (%d+)$')
  if not exp or tonumber(exp) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= ARGV[1] and p ~= ARGV[2] and not other then
    other = {all[i], p}
  end
end
if other and ARGV[4] == 'join' then return other end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. string.format('%.0f', now + tonumber(ARGV[3])))
return other or {}
`;

const DEFINITIONS = {
  ambitSub: { lua: SUB, numberOfKeys: 3 },
  ambitUnsub: { lua: UNSUB, numberOfKeys: 3 },
  // numberOfKeys is per call (the recipients' streams are keys): it is passed as the first argument.
  ambitDeliver: { lua: publishing(DELIVER, 'PUBLISH') },
  ambitDeliverSharded: { lua: publishing(DELIVER, 'SPUBLISH') },
  ambitOpen: { lua: OPEN, numberOfKeys: 8 },
  ambitOwe: { lua: OWE },
  ambitOweClose: { lua: OWE_CLOSE, numberOfKeys: 2 },
  ambitAcks: { lua: ACKS, numberOfKeys: 1 },
  ambitPurge: { lua: PURGE, numberOfKeys: 6 },
  ambitRevoke: { lua: publishing(REVOKE, 'PUBLISH'), numberOfKeys: 1 },
  ambitRevokeSharded: { lua: publishing(REVOKE, 'SPUBLISH'), numberOfKeys: 1 },
  ambitDrop: { lua: publishing(DROP, 'PUBLISH'), numberOfKeys: 7 },
  ambitDropSharded: { lua: publishing(DROP, 'SPUBLISH'), numberOfKeys: 7 },
  ambitLeaseAcquire: { lua: LEASE_ACQUIRE, numberOfKeys: 2 },
  ambitLeaseRenew: { lua: LEASE_RENEW, numberOfKeys: 1 },
  ambitLeaseRelease: { lua: LEASE_RELEASE, numberOfKeys: 1 },
  ambitCommit: { lua: COMMIT, numberOfKeys: 2 },
  ambitStats: { lua: STATS, numberOfKeys: 2 },
  // numberOfKeys is per call (the fresh events' ids are keys): it is passed as the first argument.
  ambitAnswer: { lua: publishing(ANSWER, 'PUBLISH') },
  ambitAnswerSharded: { lua: publishing(ANSWER, 'SPUBLISH') },
  ambitFenceRaise: { lua: FENCE_RAISE, numberOfKeys: 1 },
  ambitQuota: { lua: QUOTA, numberOfKeys: 1 },
  // numberOfKeys is per call (the offsets that hold the stream are keys): passed first.
  ambitKeep: { lua: KEEP },
  // Sharding by space (geo-scripts.ts).
  ambitGeoSub: { lua: GEO_SUB, numberOfKeys: 7 },
  ambitGeoUnsub: { lua: GEO_UNSUB, numberOfKeys: 5 },
  ambitGeoPurge: { lua: GEO_PURGE, numberOfKeys: 8 },
  ambitGeoLoc: { lua: GEO_LOC, numberOfKeys: 6 },
  ambitGeoPub: { lua: GEO_PUB, numberOfKeys: 3 },
  ambitGeoMove: { lua: GEO_MOVE, numberOfKeys: 4 },
  ambitGeoMap: { lua: GEO_MAP, numberOfKeys: 2 },
  ambitPresence: { lua: PRESENCE, numberOfKeys: 1 },
} as const;

export type ScriptName = keyof typeof DEFINITIONS;
type Arg = string | number | Buffer;

/** Registers every script on a connection (pipelines made from it get them too). */
export function defineScripts(r: Conn): void {
  for (const [name, def] of Object.entries(DEFINITIONS)) r.defineCommand(name, def);
}

/** Runs a script on a connection defined with defineScripts(). */
export function runScript(r: Conn, name: ScriptName, ...args: Arg[]): Promise<unknown> {
  return (r as unknown as Record<ScriptName, (...a: Arg[]) => Promise<unknown>>)[name](...args);
}

/** Queues a script in a pipeline of such a connection. */
export function queueScript(p: ChainableCommander, name: ScriptName, ...args: Arg[]): void {
  (p as unknown as Record<ScriptName, (...a: Arg[]) => unknown>)[name](...args);
}
