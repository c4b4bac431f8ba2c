/**
 * The owed windows of a deployment sharded by space (docs/service.md, Sharding by space): a shard
 * that applies devices' arrival past its wait bound lets the shard they left still store what it
 * owes them (OWE), and closes the windows once that shard has stored past the hand-over
 * (OWE_CLOSE); DELIVER (scripts.ts) takes a notification within a window.
 */
import { FENCE, PARSE_ID, STATE } from './lua-parts.js';

/**
 * Sharded by space: a shard that applies devices' arrival without the shard they left having
 * stored past the hand-over (its wait bound passed) first opens an owed window in each device's
 * state: what the shard left behind stores for the device up to the hand-over's release entry,
 * after the device's marker as it is now, is still stored after this shard moved the marker on
 * (DELIVER). The same hand-over opening it again (a replay) leaves it as it is. A device may hold
 * several, one per such hand-over (it left one stuck shard, then another before the first stored
 * again): each has its own marker, which follows every store within its range, so each shard left
 * behind stores what it owes once whichever order the shards store in. Past `most` windows nothing
 * is written (-1: that arrival is not forced, it waits for the shard it comes from).
 * The window starts at the marker as DELIVER would take it: a device purged since its state was
 * written (no state, born:{device} set) owes nothing from before its purge.
 * KEYS: dstate, nseq, nlast (devices without a state, from earlier versions), fence, then each
 * device's born:{device}. ARGV: the release entry id, the most windows a device may hold, then the
 * devices, then the caller's fencing token. Returns how many devices, or -1.
 */
export const OWE = `${PARSE_ID}${STATE}${FENCE}
check_fence(KEYS[4], ARGV[#ARGV])
local rm, rs = parse_id(ARGV[1])
local most = tonumber(ARGV[2])
local n = #ARGV - 3
local devs = {}
for i = 1, n do devs[i] = ARGV[2 + i] end
local raws = redis.call('HMGET', KEYS[1], unpack(devs))
local seqs = redis.call('HMGET', KEYS[2], unpack(devs))
local lasts = redis.call('HMGET', KEYS[3], unpack(devs))
local borns = redis.call('MGET', unpack(KEYS, 5, 4 + n))
local out = {}
for i = 1, n do
  local s = load_state(raws[i], seqs[i], lasts[i])
  if borns[i] then
    local bm, bs = parse_id(borns[i])
    if bm and is_after(bm, bs, 1e15, s[5], s[6], s[7]) then s[5], s[6], s[7] = bm, bs, 1e15 end
  end
  if window_of(s, rm, rs) < 0 then
    if windows(s) >= most then return -1 end
    local k = #s
    s[k + 1], s[k + 2], s[k + 3], s[k + 4], s[k + 5], s[k + 6], s[k + 7], s[k + 8] = s[5], s[6], s[7], rm, rs, s[5], s[6], s[7]
  end
  out[2 * i - 1] = devs[i]
  out[2 * i] = pack_state(s)
end
redis.call('HSET', KEYS[1], unpack(out))
return n
`;

/**
 * Closes the owed windows a hand-over opened (OWE), once every shard it waited for has stored past
 * its release entry: that shard stores nothing up to it again (its replays start after its stored
 * offset), so the window goes (with the last, the device's state is seven doubles again). Windows
 * of other releases are left as they are.
 * KEYS: dstate, fence. ARGV: the release entry id, then the devices, then the caller's fencing token.
 * Returns how many windows were closed.
 */
export const OWE_CLOSE = `${PARSE_ID}${STATE}${FENCE}
check_fence(KEYS[#KEYS], ARGV[#ARGV])
local rm, rs = parse_id(ARGV[1])
local closed = 0
for i = 2, #ARGV - 1 do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw and #raw > 56 then
    local s = load_state(raw)
    local w = window_of(s, rm, rs)
    if w >= 0 then
      for k = 1, 8 do table.remove(s, 8 + 8 * w) end
      redis.call('HSET', KEYS[1], ARGV[i], pack_state(s))
      closed = closed + 1
    end
  end
end
return closed
`;
