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

/** The next command id: Redis's clock, never behind the last id given; q steps by 3. */
const NEXT_ID = `
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
  for _, v in ipairs(redis.call('HVALS', subs_key)) do out[#out + 1] = 's'; out[#out + 1] = v end
end
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
 *       the 16 position bytes the gateway placed the device by ('' none), that position's cell shard.
 * Returns {entry id, home shard ('' none), wide count}, or ALREADY_EXISTS / NOT_FOUND / RESOURCE_EXHAUSTED.
 */
export const GEO_SUB = `${NEXT_ID}
local sp, mode, dev, sid, json = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
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
  -- Homed nowhere yet: stored only; its first position carries it to a shard.
  id = id_at(base, q, 0)
  redis.call('HSET', KEYS[2], sid, id .. ' ' .. json)
  return {id, '', tostring(w)}
end
if cur == target then
  id = id_at(base, q, 0)
  redis.call('XADD', sp .. target .. ':in', 'MAXLEN', '~', maxlen, id, 't', 'sub', 'dev', dev, 'sub', json)
  redis.call('HSET', KEYS[2], sid, id .. ' ' .. json)
else
  id = id_at(base, q, 2)
  redis.call('HSET', KEYS[2], sid, id .. ' ' .. json)
  if cur then
    redis.call('XADD', sp .. cur .. ':in', 'MAXLEN', '~', maxlen, id_at(base, q, 1), 't', 'rel', 'd', dev)
    redis.call('SREM', sp .. cur .. ':subdevs', dev)
  end
  local f = {'t', 'acq'}
  acq_fields(f, dev, cur or '', redis.call('HGET', KEYS[7], dev), KEYS[2])
  redis.call('XADD', sp .. target .. ':in', 'MAXLEN', '~', maxlen, id, unpack(f))
  redis.call('HSET', KEYS[4], dev, target)
  redis.call('SADD', sp .. target .. ':subdevs', dev)
  if tonumber(target) < shards then grow_reach(KEYS[6], target, device_reach(KEYS[3])) else occupy(KEYS[6], target) end
end
if tonumber(target) < shards and not wide then grow_reach(KEYS[6], target, radius) end
return {id, target, tostring(w)}
`;

/**
 * Remove one subscription of a device and queue its command on the device's home shard (the device
 * stays there: a device with no wide subscription left moves to its geographic home with its next
 * position).
 * KEYS: seq, subs:{device}, meta:{device}, home, wide. ARGV: shard prefix, device, subscription id, in maxlen.
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
if cur then redis.call('XADD', sp .. cur .. ':in', 'MAXLEN', '~', ARGV[4], id, 't', 'unsub', 'dev', dev, 'id', sid) end
return id
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
 * ARGV: shard prefix, shared prefix (meta:, subs:), in maxlen, shards, then per device (each
 *       once): device, its encoded record (u16 id length, id, f64 lat, f64 lon), the shards it may
 *       stay at (",3,4,"), the shard of its cell, its wide shard.
 * Returns the number of devices handed over.
 */
export const GEO_LOC = `${NEXT_ID}
local sp, shp, maxlen, shards = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local first = 5
local n = (#ARGV - first + 1) / 5
local devs = {}
for i = 1, n do devs[i] = ARGV[first + 5 * (i - 1)] end
local homes = redis.call('HMGET', KEYS[2], unpack(devs))
local wides = redis.call('HMGET', KEYS[3], unpack(devs))
local base, q = next_id(KEYS[1])
local locs, loc_order = {}, {}
local rel, acq, rel_order, acq_order = {}, {}, {}, {}
local pos = {}
local moved = 0
for i = 1, n do
  local j = first + 5 * (i - 1)
  local dev, rec = devs[i], ARGV[j + 1]
  local p = string.sub(rec, -16)
  local cur = homes[i]
  local target
  if wides[i] and tonumber(wides[i]) > 0 then
    target = cur or ARGV[j + 4]
  elseif cur and tonumber(cur) < shards and string.find(ARGV[j + 2], ',' .. cur .. ',', 1, true) then
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
    moved = moved + 1
    if cur then
      if not rel[cur] then rel[cur] = {'t', 'rel'}; rel_order[#rel_order + 1] = cur end
      local r = rel[cur]
      r[#r + 1] = 'd'; r[#r + 1] = dev
      redis.call('SREM', sp .. cur .. ':subdevs', dev)
    end
    if not acq[target] then acq[target] = {'t', 'acq'}; acq_order[#acq_order + 1] = target end
    acq_fields(acq[target], dev, cur or '', p, shp .. 'subs:' .. dev)
    redis.call('HSET', KEYS[2], dev, target)
    redis.call('SADD', sp .. target .. ':subdevs', dev)
    if tonumber(target) < shards then grow_reach(KEYS[5], target, device_reach(shp .. 'meta:' .. dev)) else occupy(KEYS[5], target) end
  end
end
for _, k in ipairs(loc_order) do
  local l = locs[k]
  redis.call('XADD', sp .. k .. ':in', 'MAXLEN', '~', maxlen, id_at(base, q, 0), 't', 'loc', 'data', struct.pack('<BI4', 1, #l) .. table.concat(l))
end
redis.call('HSET', KEYS[4], unpack(pos))
for _, k in ipairs(rel_order) do redis.call('XADD', sp .. k .. ':in', 'MAXLEN', '~', maxlen, id_at(base, q, 1), unpack(rel[k])) end
for _, k in ipairs(acq_order) do redis.call('XADD', sp .. k .. ':in', 'MAXLEN', '~', maxlen, id_at(base, q, 2), unpack(acq[k])) end
redis.call('HINCRBY', KEYS[6], 'locations', n)
return moved
`;

/**
 * A publish: one `pub` entry in every shard it visits, all with one id, each with the events that
 * visit that shard and their indices in the publish. The gateway chose the shards by the reach
 * hash at the version it names; a newer version fails the call with the hash, to choose again.
 * KEYS: seq, reach, stats. ARGV: shard prefix, in maxlen, reach version, correlation id, gateway id,
 *       event count, then per shard: shard, events JSON, indices JSON, and the positions among
 *       them of the events it counts (each event is counted by one shard it visits).
 * Returns {'OK', entry id} or {'REACH', field, value, …}.
 */
export const GEO_PUB = `${NEXT_ID}
if (redis.call('HGET', KEYS[2], 'v') or '0') ~= ARGV[3] then
  local r = redis.call('HGETALL', KEYS[2])
  table.insert(r, 1, 'REACH')
  return r
end
local base, q = next_id(KEYS[1])
local id = id_at(base, q, 0)
for i = 7, #ARGV, 4 do
  redis.call('XADD', ARGV[1] .. ARGV[i] .. ':in', 'MAXLEN', '~', ARGV[2], id, 't', 'pub', 'corr', ARGV[4], 'gw', ARGV[5], 'events', ARGV[i + 1], 'idx', ARGV[i + 2], 'own', ARGV[i + 3])
end
redis.call('HINCRBY', KEYS[3], 'published', ARGV[6])
return {'OK', id}
`;
