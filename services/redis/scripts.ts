/**
 * The Lua scripts that keep Redis state consistent: each runs atomically, so a subscription's
 * stored form and its command in `{p}in` never disagree, and a notification's id, dedupe marker,
 * trim and counters change together. Registered with ioredis `defineCommand` (EVALSHA, falling back
 * to EVAL once per connection), usable on a connection and in a pipeline.
 *
 * Ids are compared as two numbers (ms, seq); both are below 2^53 so Lua's doubles hold them.
 * Numbers are written back with '%.0f' because Lua's tostring would print 1.7e+12.
 */
import type { ChainableCommander, Redis } from 'ioredis';

const PARSE_ID = `
local function parse_id(id)
  local a, b = string.match(id, '^(%d+)%-(%d+)$')
  return tonumber(a), tonumber(b)
end
-- {p}nlast values: "<ms> <source in-entry id> <event index> <stream length after the last change>"
local function parse_last(v)
  local ms, src, idx, len = string.match(v, '^(%d+) (%S+) (%d+) (%d+)$')
  return tonumber(ms), src, tonumber(idx), tonumber(len)
end
-- Redis's own clock, the one every process of a deployment shares; a caller may pass its own
-- (an injected test clock), as milliseconds, in place of ''.
local function now_ms(given)
  if given ~= nil and given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
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
 * Store one event's notification for each of its recipients, at most once per device and (in
 * entry, event index): the matcher replays entries after a crash, and the per-device marker in
 * nlast makes the replay a no-op for a device that already has it. The clock is read once and the
 * counters added once per call.
 * KEYS: nseq, nlast, stats, then n:{device} of each recipient.
 * ARGV: source in-entry id, event index, published ms, event JSON, max per device, max age ms,
 *       doorbell channel prefix, now ms ('' = Redis's clock), then per recipient: device,
 *       subscription ids JSON.
 * Returns how many notifications were stored (a device that already has this one is skipped).
 */
const DELIVER_EVENT = `${PARSE_ID}
local sms, sseq = parse_id(ARGV[1])
local sidx = tonumber(ARGV[2])
local pub = tonumber(ARGV[3])
local max_len = tonumber(ARGV[5])
local max_age = tonumber(ARGV[6])
local minid = string.format('%.0f', now_ms(ARGV[8]) - max_age)
local stored = 0
local dropped = 0
for i = 4, #KEYS do
  local key = KEYS[i]
  local dev = ARGV[9 + 2 * (i - 4)]
  local last = redis.call('HGET', KEYS[2], dev)
  local before = redis.call('XLEN', key)
  local last_ms = 0
  local skip = false
  if last then
    local lms, lsrc, lidx, llen = parse_last(last)
    last_ms = lms
    local lsms, lsseq = parse_id(lsrc)
    if sms < lsms or (sms == lsms and (sseq < lsseq or (sseq == lsseq and sidx <= lidx))) then skip = true
    elseif before == 0 and llen > 0 then dropped = dropped + llen end
  end
  if not skip then
    local ms = math.max(pub, last_ms)
    local ord = redis.call('HINCRBY', KEYS[1], dev, 1)
    local id = string.format('%.0f-%.0f', ms, ord)
    redis.call('XADD', key, 'MAXLEN', ARGV[5], id, 'e', ARGV[4], 's', ARGV[10 + 2 * (i - 4)], 'p', ARGV[3])
    if before + 1 > max_len then dropped = dropped + before + 1 - max_len end
    dropped = dropped + redis.call('XTRIM', key, 'MINID', minid)
    redis.call('PEXPIRE', key, max_age)
    redis.call('HSET', KEYS[2], dev, string.format('%.0f %s %s %d', ms, ARGV[1], ARGV[2], redis.call('XLEN', key)))
    redis.call('PUBLISH', ARGV[7] .. dev, id)
    stored = stored + 1
  end
end
if stored > 0 then redis.call('HINCRBY', KEYS[3], 'notifications', stored) end
if dropped > 0 then redis.call('HINCRBY', KEYS[3], 'dropped', dropped) end
return stored
`;

/**
 * What an inbox needs to open, read in one step: the resume point, the last ordinal and the
 * oldest retained id, after dropping (and counting) what is older than the matcher's max age,
 * the whole stream included when it expired.
 * KEYS: n:{device}, nseq, acked, stats, config, nlast. ARGV: device, 'acked' | 'token', token,
 * now ms ('' = Redis's clock).
 * Returns { start, last ordinal, oldest retained id or '' }.
 */
const OPEN = `${PARSE_ID}
local start = ARGV[3]
if ARGV[2] == 'acked' then start = redis.call('HGET', KEYS[3], ARGV[1]) or '' end
local seq = redis.call('HGET', KEYS[2], ARGV[1]) or '0'
local max_age = tonumber(redis.call('HGET', KEYS[5], 'maxAgeMs') or '0')
local dropped = 0
if max_age > 0 then dropped = redis.call('XTRIM', KEYS[1], 'MINID', string.format('%.0f', now_ms(ARGV[4]) - max_age)) end
local last = redis.call('HGET', KEYS[6], ARGV[1])
if last then
  local lms, lsrc, lidx, llen = parse_last(last)
  local len = redis.call('XLEN', KEYS[1])
  if len == 0 and dropped == 0 then dropped = llen end
  if len ~= llen then redis.call('HSET', KEYS[6], ARGV[1], string.format('%.0f %s %d %d', lms, lsrc, lidx, len)) end
end
if dropped > 0 then redis.call('HINCRBY', KEYS[4], 'dropped', dropped) end
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local oldest = ''
if #first > 0 then oldest = first[1][1] end
return {start, seq, oldest}
`;

/** Moves a device's ack point forward only. KEYS: acked. ARGV: device, delivery id. Returns 1 when moved. */
const ACK = `${PARSE_ID}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local cm, cs = parse_id(cur)
  local nm, ns = parse_id(ARGV[2])
  if nm < cm or (nm == cm and ns <= cs) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`;

const DEFINITIONS = {
  ambitSub: { lua: SUB, numberOfKeys: 3 },
  ambitUnsub: { lua: UNSUB, numberOfKeys: 3 },
  // numberOfKeys is per call (the recipients' streams are keys): it is passed as the first argument.
  ambitDeliverEvent: { lua: DELIVER_EVENT },
  ambitOpen: { lua: OPEN, numberOfKeys: 6 },
  ambitAck: { lua: ACK, numberOfKeys: 1 },
} as const;

export type ScriptName = keyof typeof DEFINITIONS;
type Arg = string | number | Buffer;

/** Registers every script on a connection (pipelines made from it get them too). */
export function defineScripts(r: Redis): void {
  for (const [name, def] of Object.entries(DEFINITIONS)) r.defineCommand(name, def);
}

/** Runs a script on a connection defined with defineScripts(). */
export function runScript(r: Redis, name: ScriptName, ...args: Arg[]): Promise<unknown> {
  return (r as unknown as Record<ScriptName, (...a: Arg[]) => Promise<unknown>>)[name](...args);
}

/** Queues a script in a pipeline of such a connection. */
export function queueScript(p: ChainableCommander, name: ScriptName, ...args: Arg[]): void {
  (p as unknown as Record<ScriptName, (...a: Arg[]) => unknown>)[name](...args);
}
