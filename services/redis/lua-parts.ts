/**
 * Lua shared by the scripts (scripts.ts, owed-scripts.ts): id parsing and Redis's clock, the
 * fence of a leader's writes, and a device's delivery state.
 */

export const PARSE_ID = `
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
 * Fencing: the matcher that holds the lease got its token from INCR of the epoch key, so the epoch
 * is the token of the newest leader. A write that carries an older token (a leader that paused past
 * its lease while another took over) is refused whole, before it changes anything. '' skips the
 * check (tools that own the deployment alone).
 */
export const FENCE = `
local function check_fence(epoch_key, token)
  if token == '' then return end
  local epoch = redis.call('GET', epoch_key)
  if epoch ~= token then
    error({err = 'FENCED matcher lease epoch is ' .. tostring(epoch) .. ', this matcher holds ' .. token})
  end
end
`;

// A device's delivery state, one field of {p}dstate: seven doubles (struct '<ddddddd'):
// last id's ms, last ordinal, stream length after the last change, when its TTL was last set
// (ms), and the marker of its last stored notification (source in-entry ms, seq, event index).
// A device taken over by a shard that stopped waiting for the shard it left (OWE) has eight more
// per owed window: the window's low end (the marker then: ms, seq, index; exclusive), its high end
// (the hand-over's release entry: ms, seq; inclusive, any index), and the marker of what was
// stored in the window since (ms, seq, index). Window w (from 0) starts at index 8 + 8 w.
// A device without one may have the layout of earlier versions ({p}nseq + {p}nlast): read once.
export const STATE = `
local function load_state(raw, seq, last)
  if raw then
    local n = math.floor(#raw / 8)
    local v = {struct.unpack('<' .. string.rep('d', n), raw)}
    local s = {}
    for i = 1, n do s[i] = v[i] end
    return s
  end
  local s = {0, tonumber(seq or '0'), 0, 0, 0, 0, -1}
  if last then
    local lms, lsrc, lidx, llen = parse_last(last)
    local sm, ss = parse_id(lsrc)
    s[1], s[3], s[5], s[6], s[7] = lms, llen, sm, ss, lidx
  end
  return s
end
local function pack_state(s)
  return struct.pack('<' .. string.rep('d', #s), unpack(s))
end
-- (am, as, ai) after (bm, bs, bi): in-entry ids, then event indices.
local function is_after(am, as, ai, bm, bs, bi)
  return am > bm or (am == bm and (as > bs or (as == bs and ai > bi)))
end
-- The owed windows a state holds.
local function windows(s)
  return math.floor((#s - 7) / 8)
end
-- Whether owed window w of the state takes a notification of (sm, ss, si): up to its high end and
-- after its marker (which starts at its low end).
local function window_takes(s, w, sm, ss, si)
  local b = 7 + 8 * w
  return (sm < s[b + 4] or (sm == s[b + 4] and ss <= s[b + 5])) and is_after(sm, ss, si, s[b + 6], s[b + 7], s[b + 8])
end
-- Whether some owed window takes a notification of (sm, ss, si).
local function some_window_takes(s, sm, ss, si)
  for w = 0, windows(s) - 1 do
    if window_takes(s, w, sm, ss, si) then return true end
  end
  return false
end
-- A notification of (sm, ss, si) stored: the marker of every window that takes it follows it.
-- True when some window took it.
local function follow_windows(s, sm, ss, si)
  local took = false
  for w = 0, windows(s) - 1 do
    if window_takes(s, w, sm, ss, si) then
      local b = 7 + 8 * w
      s[b + 6], s[b + 7], s[b + 8] = sm, ss, si
      took = true
    end
  end
  return took
end
-- The index (from 0) of the window whose high end is the release entry (rm, rs), or -1.
local function window_of(s, rm, rs)
  for w = 0, windows(s) - 1 do
    local b = 7 + 8 * w
    if s[b + 4] == rm and s[b + 5] == rs then return w end
  end
  return -1
end
`;
