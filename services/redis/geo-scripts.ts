/**
 * The scripts of a deployment sharded by space (keys.ts `GeoSpec`): every write that enters a
 * shard's command stream goes through one of them, atomically, in the one hash slot all shards'
 * streams and the devices' state share. That gives all shards one order: each script takes the
 * next command id from `{p}{g}seq` (Redis's clock in ms, then a sequence), so the entries one
 * script writes to several streams carry the same id, and a publish is before or after a
 * hand-over in every stream alike.
 *
 * Ids: a script that takes "<ms>-<q>" writes location batches, publishes and subscription changes
 * at q, a hand-over's `rel` entries (the devices leave) at q+1 and its `acq` entries (they arrive,
 * with their whole state) at q+2; the next script starts at q+3. A shard that reads an `acq` entry
 * applies it only once the shard each device leaves has stored its offset at or past q+1: every
 * notification the old shard owes the device is stored before the new one stores any, so the
 * deliver script's per-device marker (which orders by command id) stays in order across shards.
 *
 * Keys a script builds from the names it is given are in the same slot as its KEYS (tag `{g}` on a
 * cluster). Shard k's keys are `<shard prefix>k:…` (keys.ts).
 */

/**
 * Devices one location or move call may carry: its entries then stay within what Lua unpacks
 * (about 8000 values: an `acq` entry has 8 fields a device, a `rel` entry 2, the positions' HSET 2).
 */
export const GEO_MAX_DEVICES_PER_CALL = 512;

/** The next command id: Redis's clock, never behind the last id given; q steps by 3. */
const NEXT_ID = `local MAX_DEVICES = ${GEO_MAX_DEVICES_PER_CALL}
local function next_id(seq_key)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ms, q = now, 0
  local last = redis.call('GET', seq_key)
  if last then
    local lm, lq = string.match(last, '^(%d+)%-(%d+)$')
    lm, lq = tonumber(lm), tonumber(lq)
    if lm >= now then ms, q = lm, lq + 3 end
  end
  local base = string.format('%.0f', ms)
  redis.call('SET', seq_key, base .. '-' .. string.format('%.0f', q))
  return base, q
end
local function id_at(base, q, j) return base .. '-' .. string.format('%.0f', q + j) end
-- The largest anchored radius shard k ever held grows to r (and the hash's version moves).
local function grow_reach(reach_key, k, r)
  if r == nil or r <= 0 then return end
  local cur = tonumber(redis.call('HGET', reach_key, k) or '0')
  if r > cur then
    redis.call('HSET', reach_key, k, string.format('%.17g', r))
    redis.call('HINCRBY', reach_key, 'v', 1)
  end
end
-- A wide shard that holds a device is visited by every publish from then on (grow-only, like reach).
local function occupy(reach_key, k)
  if redis.call('HSETNX', reach_key, k, 'w') == 1 then redis.call('HINCRBY', reach_key, 'v', 1) end
end
-- A device's largest anchored radius, from its subscriptions' "<radius> a|w" records.
local function device_reach(meta_key)
  local r = 0
  for _, v in ipairs(redis.call('HVALS', meta_key)) do
    local x = tonumber(string.match(v, '^(%S+)'))
    if x and x > r then r = x end
  end
  return r
end
-- The fields of one device in an acq entry: where it comes from, its position, its subscriptions.
local function acq_fields(out, dev, from, pos, subs_key)
  out[#out + 1] = 'd'; out[#out + 1] = dev
  out[#out + 1] = 'f'; out[#out + 1] = from
  if pos then out[#out + 1] = 'p'; out[#out + 1] = pos end
  -- Every stored subscription in one field, a line each (stored JSON has no raw newline), so an
  -- entry's field count does not grow with them (Lua unpacks at most about 8000 values).
  local subs = redis.call('HVALS', subs_key)
  if #subs > 0 then out[#out + 1] = 's'; out[#out + 1] = table.concat(subs, '\\n') end
end
-- The hand-overs of one script: rel and acq entries by shard, written by write_hand_overs.
local function hand_overs() return {rel = {}, acq = {}, rel_order = {}, acq_order = {}, n = 0} end
-- Device dev leaves shard cur (false: none) for target, with position pos (false: none). The rel
-- entry carries the position the device had on cur (still the stored one: a location script
-- stores the new positions after its hand-overs), for a shard that reads its stream again.
local function hand_over(h, sp, shp, shards, home_key, reach_key, dev, cur, target, pos)
  h.n = h.n + 1
  if cur then
    if not h.rel[cur] then h.rel[cur] = {'t', 'rel'}; h.rel_order[#h.rel_order + 1] = cur end
    local r = h.rel[cur]
    r[#r + 1] = 'd'; r[#r + 1] = dev
    local was = redis.call('HGET', shp .. 'pos', dev)
    if was then r[#r + 1] = 'p'; r[#r + 1] = was end
    r[#r + 1] = 'to'; r[#r + 1] = target
    redis.call('SREM', sp .. cur .. ':subdevs', dev)
  else
    redis.call('SREM', shp .. 'unhomed', dev)
  end
  if not h.acq[target] then h.acq[target] = {'t', 'acq'}; h.acq_order[#h.acq_order + 1] = target end
  acq_fields(h.acq[target], dev, cur or '', pos, shp .. 'subs:' .. dev)
  redis.call('HSET', home_key, dev, target)
  redis.call('SADD', sp .. target .. ':subdevs', dev)
  if tonumber(target) < shards then grow_reach(reach_key, target, device_reach(shp .. 'meta:' .. dev)) else occupy(reach_key, target) end
end
local function write_hand_overs(h, sp, maxlen, base, q)
  for _, k in ipairs(h.rel_order) do redis.call('XADD', sp .. k .. ':in', 'MAXLEN', '~', maxlen, id_at(base, q, 1), unpack(h.rel[k])) end
  for _, k in ipairs(h.acq_order) do redis.call('XADD', sp .. k .. ':in', 'MAXLEN', '~', maxlen, id_at(base, q, 2), unpack(h.acq[k])) end
end
-- Whether the gateway placed by the shard map version the deployment has now.
local function map_is(reach_key, version) return (redis.call('HGET', reach_key, 'map') or '0') == version end
`;

/**
 * Add or replace one subscription of a device; queue its command on the device's home shard. A
 * device that now holds a subscription with a fixed or no area (wide) moves to its wide shard. A
 * device without a home is homed by its position: at its cell's shard (the gateway placed the
 * position it read; one that moved since goes to its wide shard until its next position), or,
 * without a position and without a wide subscription, nowhere yet (its anchored areas match
 * nothing until its first position, which homes it with its subscriptions). The stored
 * subscription's version is the id of the entry that carries it.
 * KEYS: seq, subs:{device}, meta:{device}, home, wide, reach, pos.
 * ARGV: shard prefix, mode ('add'|'replace'), device, subscription id, JSON, cap, in maxlen,
 *       anchored radius (its largest, 0 for none), wide ('1'|'0'), the device's wide shard, shards,
 *       the 16 position bytes the gateway placed the device by ('' none), that position's cell shard,
 *       the shard map version the gateway placed it by, the shared prefix.
 * Returns {entry id, home shard ('' none), wide count}, or ALREADY_EXISTS / NOT_FOUND /
 * RESOURCE_EXHAUSTED, or MAP when the shard map has another version now (nothing written).
 */
export const GEO_SUB = `${NEXT_ID}
local sp, mode, dev, sid, json = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not map_is(KEYS[6], ARGV[14]) then return 'MAP' end
local maxlen, radius, wide, wshard, shards = ARGV[7], tonumber(ARGV[8]), ARGV[9] == '1', ARGV[10], tonumber(ARGV[11])
local exists = redis.call('HEXISTS', KEYS[2], sid) == 1
if mode == 'add' then
  if exists then return 'ALREADY_EXISTS' end
  if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[6]) then return 'RESOURCE_EXHAUSTED' end
elseif not exists then
  return 'NOT_FOUND'
end
local old = redis.call('HGET', KEYS[3], sid)
local was_wide = old ~= false and string.sub(old, -1) == 'w'
local w = tonumber(redis.call('HGET', KEYS[5], dev) or '0')
if wide and not was_wide then w = w + 1 elseif was_wide and not wide then w = w - 1 end
if w > 0 then redis.call('HSET', KEYS[5], dev, w) else redis.call('HDEL', KEYS[5], dev) end
redis.call('HSET', KEYS[3], sid, ARGV[8] .. (wide and ' w' or ' a'))
local cur = redis.call('HGET', KEYS[4], dev)
local pos = redis.call('HGET', KEYS[7], dev)
local placed = pos and ARGV[12] ~= '' and pos == ARGV[12]
local target
if w > 0 then
  if cur and tonumber(cur) >= shards then target = cur else target = wshard end
elseif cur and (tonumber(cur) < shards or not placed) then
  target = cur
elseif placed then
  target = ARGV[13]
elseif pos then
  target = wshard
else
  target = false
end
local base, q = next_id(KEYS[1])
local id
if not target then
  -- Homed nowhere yet: stored only (listed in unhomed); its first position carries it to a shard.
  id = id_at(base, q, 0)
  redis.call('HSET', KEYS[2], sid, id .. ' ' .. json)
  redis.call('SADD', ARGV[15] .. 'unhomed', dev)
  return {id, '', tostring(w)}
end
if cur == target then
  id = id_at(base, q, 0)
  redis.call('XADD', sp .. target .. ':in', 'MAXLEN', '~', maxlen, id, 't', 'sub', 'dev', dev, 'sub', json)
  redis.call('HSET', KEYS[2], sid, id .. ' ' .. json)
else
  id = id_at(base, q, 2)
  redis.call('HSET', KEYS[2], sid, id .. ' ' .. json)
  local h = hand_overs()
  hand_over(h, sp, ARGV[15], shards, KEYS[4], KEYS[6], dev, cur, target, pos)
  write_hand_overs(h, sp, maxlen, base, q)
end
if tonumber(target) < shards and not wide then grow_reach(KEYS[6], target, radius) end
return {id, target, tostring(w)}
`;

/**
 * Remove one subscription of a device and queue its command on the device's home shard (the device
 * stays there: a device with no wide subscription left moves to its geographic home with its next
 * position).
 * KEYS: seq, subs:{device}, meta:{device}, home, wide. ARGV: shard prefix, device, subscription id, in maxlen,
 * shared prefix.
 * Returns the entry id or NOT_FOUND.
 */
export const GEO_UNSUB = `${NEXT_ID}
local sp, dev, sid = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HDEL', KEYS[2], sid) == 0 then return 'NOT_FOUND' end
local m = redis.call('HGET', KEYS[3], sid)
redis.call('HDEL', KEYS[3], sid)
if m and string.sub(m, -1) == 'w' then
  if redis.call('HINCRBY', KEYS[5], dev, -1) <= 0 then redis.call('HDEL', KEYS[5], dev) end
end
local cur = redis.call('HGET', KEYS[4], dev)
local base, q = next_id(KEYS[1])
local id = id_at(base, q, 0)
if cur then redis.call('XADD', sp .. cur .. ':in', 'MAXLEN', '~', ARGV[4], id, 't', 'unsub', 'dev', dev, 'id', sid)
elseif redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SREM', ARGV[5] .. 'unhomed', dev) end
return id
`;

/**
 * Purge a device: its subscriptions, homes, position and last-seen record go, and its home shard
 * (without one, its wide shard) gets a `purge` command (the shard forgets it and drops its notifications). With
 * a time in ARGV[4], only if the device was last seen before it.
 * KEYS: seq, subs:{device}, meta:{device}, home, wide, pos, seen, stats. ARGV: shard prefix,
 * device, in maxlen, seen-before ms or '', the counter to add one to (devicesPurged or
 * devicesExpired) if the device held anything, its wide shard (which gets the command when it
 * has no home), the shared prefix. Returns {subscriptions removed, 1 if it had a
 * position}, or SEEN.
 */
export const GEO_PURGE = `${NEXT_ID}
local sp, dev = ARGV[1], ARGV[2]
if ARGV[4] ~= '' then
  -- Expiry: only a device still unseen (one with no record was purged meanwhile, or is back).
  local at = redis.call('ZSCORE', KEYS[7], dev)
  if not at or tonumber(at) >= tonumber(ARGV[4]) then return 'SEEN' end
end
local n = redis.call('HLEN', KEYS[2])
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HDEL', KEYS[5], dev)
local had = redis.call('HDEL', KEYS[6], dev)
local was_seen = redis.call('ZREM', KEYS[7], dev)
local cur = redis.call('HGET', KEYS[4], dev)
redis.call('SREM', ARGV[7] .. 'unhomed', dev)
if cur then
  redis.call('HDEL', KEYS[4], dev)
  redis.call('SREM', sp .. cur .. ':subdevs', dev)
else
  -- Homed nowhere: its wide shard (which holds nothing of it) drops its notifications.
  cur = ARGV[6]
end
local base, q = next_id(KEYS[1])
redis.call('XADD', sp .. cur .. ':in', 'MAXLEN', '~', ARGV[3], id_at(base, q, 0), 't', 'purge', 'dev', dev)
if n > 0 or had > 0 or was_seen > 0 then redis.call('HINCRBY', KEYS[8], ARGV[5], 1) end
return {n, had}
`;

/**
 * A gateway's batch of positions. Each device goes to its home: its wide shard while it holds a
 * wide subscription (or, without a home, would be placed there); else the home it has while that
 * is one of the shards its guard circle touches (so a device near a border does not hop), else
 * the shard of its cell. The gateway computes both sets from the shard map; this script, which
 * alone knows the stored homes, decides. Devices that stay are written as one `loc` batch per
 * shard (codec.ts layout, built here from the gateway's encoded records); devices that change
 * shard are handed over: a `rel` entry in each shard they leave, an `acq` entry (position and
 * subscriptions) in each they come to. The positions go to `pos` either way; a device that has
 * neither a home nor a subscription gets no home (its first subscription gives it one).
 * KEYS: seq, home, wide, pos, reach, stats.
 * ARGV: shard prefix, shared prefix (meta:, subs:), in maxlen, shards, the shard map version the
 *       gateway placed by, then per device (each once): device, its encoded record (u16 id
 *       length, id, f64 lat, f64 lon), the shards it may stay at (",3,4,"), the shard of its cell,
 *       its wide shard.
 * Returns the number of devices handed over, or MAP when the shard map has another version now
 * (nothing written).
 */
export const GEO_LOC = `${NEXT_ID}
local sp, shp, maxlen, shards = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not map_is(KEYS[5], ARGV[5]) then return 'MAP' end
local first = 6
local n = (#ARGV - first + 1) / 5
-- Checked before anything is written: a script that fails halfway keeps what it wrote.
if n > MAX_DEVICES then return redis.error_reply('ERR at most ' .. MAX_DEVICES .. ' devices per call, got ' .. n) end
local devs = {}
for i = 1, n do devs[i] = ARGV[first + 5 * (i - 1)] end
local homes = redis.call('HMGET', KEYS[2], unpack(devs))
local wides = redis.call('HMGET', KEYS[3], unpack(devs))
local base, q = next_id(KEYS[1])
local locs, loc_order = {}, {}
local h = hand_overs()
local pos = {}
for i = 1, n do
  local j = first + 5 * (i - 1)
  local dev, rec = devs[i], ARGV[j + 1]
  local p = string.sub(rec, -16)
  local cur = homes[i]
  local target
  if wides[i] and tonumber(wides[i]) > 0 then
    target = cur or ARGV[j + 4]
  elseif cur and (cur == ARGV[j + 3] or (tonumber(cur) < shards and string.find(ARGV[j + 2], ',' .. cur .. ',', 1, true))) then
    target = cur
  else
    target = ARGV[j + 3]
  end
  pos[#pos + 1] = dev; pos[#pos + 1] = p
  if not cur and redis.call('EXISTS', shp .. 'subs:' .. dev) == 0 then
    -- A device without subscriptions has no home: only its position is kept (its first
    -- subscription homes it, carrying the position).
  elseif target == cur then
    if not locs[target] then locs[target] = {}; loc_order[#loc_order + 1] = target end
    local l = locs[target]
    l[#l + 1] = rec
  else
    hand_over(h, sp, shp, shards, KEYS[2], KEYS[5], dev, cur, target, p)
  end
end
for _, k in ipairs(loc_order) do
  local l = locs[k]
  redis.call('XADD', sp .. k .. ':in', 'MAXLEN', '~', maxlen, id_at(base, q, 0), 't', 'loc', 'data', struct.pack('<BI4', 1, #l) .. table.concat(l))
end
redis.call('HSET', KEYS[4], unpack(pos))
write_hand_overs(h, sp, maxlen, base, q)
redis.call('HINCRBY', KEYS[6], 'locations', n)
return h.n
`;

/**
 * A move of cells between geographic shards (services/hub/redis-geo.ts `moveCells`): the devices
 * the gateway found homed where the new map no longer keeps them, each handed over to the shard of
 * its cell, unless it moved or changed home since the gateway read it (its own position then
 * placed it by the new map).
 * KEYS: seq, home, pos, reach. ARGV: shard prefix, shared prefix, in maxlen, shards, the shard
 *       map version, then per device: device, the home it was read with, the 16 position bytes it
 *       was read with, the shard it goes to.
 * Returns the number of devices handed over, or MAP when the shard map has another version now.
 */
export const GEO_MOVE = `${NEXT_ID}
local sp, shp, maxlen, shards = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not map_is(KEYS[4], ARGV[5]) then return 'MAP' end
local n = (#ARGV - 5) / 4
if n == 0 then return 0 end
if n > MAX_DEVICES then return redis.error_reply('ERR at most ' .. MAX_DEVICES .. ' devices per call, got ' .. n) end
local devs = {}
for i = 1, n do devs[i] = ARGV[2 + 4 * i] end
local homes = redis.call('HMGET', KEYS[2], unpack(devs))
local at = redis.call('HMGET', KEYS[3], unpack(devs))
local base, q = next_id(KEYS[1])
local h = hand_overs()
for i = 1, n do
  local j = 2 + 4 * i
  if homes[i] == ARGV[j + 1] and at[i] == ARGV[j + 2] and ARGV[j + 3] ~= homes[i] then
    hand_over(h, sp, shp, shards, KEYS[2], KEYS[4], devs[i], homes[i], ARGV[j + 3], at[i])
  end
end
write_hand_overs(h, sp, maxlen, base, q)
return h.n
`;

/**
 * The shard map's version, moved in two steps by `moveCells`: 'begin' (the new map holds the old
 * one as `prev`: publishes visit the shards of both while devices are handed over) and 'end' (the
 * old one dropped). Each bumps the reach hash's version, so gateways load the map again.
 * KEYS: map, reach. ARGV: 'begin' | 'end', the version expected now, the map JSON to store, its version.
 * Returns 'OK', or {'STALE', version now, moving ('1' | '')}.
 */
export const GEO_MAP = `
local now = redis.call('HGET', KEYS[2], 'map') or '0'
local moving = redis.call('HGET', KEYS[2], 'moving') or ''
if now ~= ARGV[2] or (ARGV[1] == 'begin' and moving ~= '') or (ARGV[1] == 'end' and moving == '') then
  return {'STALE', now, moving}
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[2], 'map', ARGV[4])
if ARGV[1] == 'begin' then redis.call('HSET', KEYS[2], 'moving', '1') else redis.call('HDEL', KEYS[2], 'moving') end
redis.call('HINCRBY', KEYS[2], 'v', 1)
return 'OK'
`;

/**
 * A publish: event ids are deduplicated here, for the whole deployment (an id seen within the
 * window, or earlier in this publish, is a duplicate: matched nowhere, answered with the reach the
 * shards recorded for its first publish); then one `pub` entry in every shard the fresh events
 * visit, all with one id, each with its events, their indices in the publish and the positions
 * among them of the events it counts (each event is counted by one shard it visits). The gateway
 * chose the shards by the reach hash at the version it names; a newer version fails the call with
 * the hash, to choose again.
 * KEYS: seq, reach, stats. ARGV: shard prefix, in maxlen, reach version, correlation id, gateway id,
 *       event count n, dedupe window ms (0: none), event-id key prefix, then per event: id, JSON,
 *       the shard that counts it; then per shard: shard, its events' indices ("0,3,5").
 * Returns {'OK', entry id, duplicate indices ("1,4"), then each duplicate's recorded reach ('' while
 * its first publish is still being matched)}, or {'REACH', field, value, …}. Each shard's answer
 * script adds its reach of the fresh events to their records (scripts.ts ANSWER).
 */
export const GEO_PUB = `${NEXT_ID}
if (redis.call('HGET', KEYS[2], 'v') or '0') ~= ARGV[3] then
  local r = redis.call('HGETALL', KEYS[2])
  table.insert(r, 1, 'REACH')
  return r
end
local n, window, eid = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local base, q = next_id(KEYS[1])
local id = id_at(base, q, 0)
-- An event's record: e (the first publish's entry), w (the shards it visits), s<k> (shard k's
-- reach of it, written by that shard's answer). Its reach once every shard has answered, else ''.
local function recorded_reach(key)
  local h = redis.call('HGETALL', key)
  local w, got, r = nil, 0, 0
  for j = 1, #h, 2 do
    if h[j] == 'w' then w = tonumber(h[j + 1])
    elseif string.sub(h[j], 1, 1) == 's' then got = got + 1; r = r + tonumber(h[j + 1]) end
  end
  if w and got >= w then return tostring(r) end
  return ''
end
local fresh, dupi, dupv, seen, visits = {}, {}, {}, {}, {}
for i = 0, n - 1 do
  local key = ARGV[9 + 3 * i]
  -- An id earlier in this publish is a duplicate whatever the window.
  if seen[key] or (window > 0 and redis.call('HSETNX', eid .. key, 'e', id) == 0) then
    dupi[#dupi + 1] = tostring(i)
    dupv[#dupv + 1] = seen[key] and '' or recorded_reach(eid .. key)
  else
    fresh[i] = true
    if window > 0 then redis.call('PEXPIRE', eid .. key, window) end
  end
  seen[key] = true
end
for s = 9 + 3 * n, #ARGV, 2 do
  local shard = ARGV[s]
  local jsons, idx, own = {}, {}, {}
  for w in string.gmatch(ARGV[s + 1], '%d+') do
    local i = tonumber(w)
    if fresh[i] then
      visits[i] = (visits[i] or 0) + 1
      jsons[#jsons + 1] = ARGV[10 + 3 * i]
      idx[#idx + 1] = w
      if ARGV[11 + 3 * i] == shard then own[#own + 1] = tostring(#idx - 1) end
    end
  end
  if #idx > 0 then
    redis.call('XADD', ARGV[1] .. shard .. ':in', 'MAXLEN', '~', ARGV[2], id, 't', 'pub', 'corr', ARGV[4], 'gw', ARGV[5],
      'events', '[' .. table.concat(jsons, ',') .. ']', 'idx', '[' .. table.concat(idx, ',') .. ']', 'own', '[' .. table.concat(own, ',') .. ']')
  end
end
if window > 0 then
  for i, v in pairs(visits) do redis.call('HSET', eid .. ARGV[9 + 3 * i], 'w', v) end
end
redis.call('HINCRBY', KEYS[3], 'published', n)
if #dupi > 0 then redis.call('HINCRBY', KEYS[3], 'duplicates', #dupi) end
local out = {'OK', id, table.concat(dupi, ',')}
for _, v in ipairs(dupv) do out[#out + 1] = v end
return out
`;
