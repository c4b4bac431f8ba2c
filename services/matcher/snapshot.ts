/**
 * A matcher's snapshot file: its subscriptions and device positions as of a command-stream
 * position, so a restarted matcher loads them from its own disk and replays the stream from there
 * instead of reading every subscription back from Redis (rebuild.ts).
 *
 * Written while the matcher goes on (a fuzzy snapshot): the records are encoded a block at a time
 * between the matcher's batches, so each device's subscriptions and each position are taken at
 * one instant between `start` (the stream position when writing began) and `end` (when it ended).
 * Every command is a whole write of one key (a subscription put or removed, a position set), so
 * replaying the stream from `start` over such a state gives, from `end` on, exactly the state of
 * a matcher that applied every command in order.
 *
 * The file (little-endian):
 *   "AMBSNAP1"                      magic, 8 bytes
 *   u32 n, n bytes                  header JSON: format, identity, engine, createdAt
 *   blocks: u32 n (> 0), n bytes    whole records; a record never spans blocks
 *     0x01 u32 a, a bytes (device), u32 b, b bytes (JSON array of its DeviceSubscription)
 *     0x02 u32 a, a bytes (device), f64 lat, f64 lon
 *     0x03 u32 a, a bytes            the pattern subscriptions' state (V8 serialization), taken at
 *                                    `start` exactly (between two batches); first, when present
 *   u32 0                           the end of the blocks
 *   u32 n, n bytes                  trailer JSON: start, end, devices, subscriptions, positions
 *   32 bytes                        SHA-256 of every byte before it
 * It is written to `<file>.tmp` (the directory made if missing), synced and renamed over the file, so a crash mid-write leaves
 * the previous snapshot. A reader checks the hash over the whole file before it hands out a record.
 */
import { createHash } from 'node:crypto';
import { type FileHandle, mkdir, open, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { DeviceSubscription } from '../hub/port.js';

const MAGIC = Buffer.from('AMBSNAP1', 'latin1');
const FORMAT = 1;
const SUBS = 1;
const POSITION = 2;
const PATTERNS = 3;
const HASH_BYTES = 32;
/** A block is flushed once it holds this much (a bigger record makes a bigger block). */
const DEFAULT_BLOCK_BYTES = 1 << 20;
/** The most a block may claim; a larger length is damage, not data. */
const MAX_BLOCK_BYTES = 1 << 30;
const READ_BYTES = 4 << 20;

/** What the matcher's state is keyed by: the deployment's stream, its instance and partition. */
export type SnapshotIdentity = string;

export interface SnapshotInfo {
  identity: SnapshotIdentity;
  /** The stream position when writing began: the replay starts after it. */
  start: string;
  /** The stream position when writing ended: from it on, the replayed state is exact. */
  end: string;
  engine: string;
  createdAt: string;
  devices: number;
  subscriptions: number;
  positions: number;
  bytes: number;
}

/** What a snapshot holds, read when it is written (between blocks the matcher goes on). */
export interface SnapshotSource {
  /** Called before the first record is taken. */
  begin?(): void;
  /**
   * Read after the last record: every command up to it was in the state whenever a record was
   * taken (the replay starts after it).
   */
  start(): string;
  /** Read after the last record: no record holds the effect of a command after it. */
  end(): string;
  engine: string;
  /** Each device with subscriptions, and its subscriptions as they are when the device is reached. */
  subscriptions(): Iterable<[string, Iterable<DeviceSubscription>]>;
  /** Each device's position as it is when it is reached. */
  positions(): Iterable<[string, number, number]>;
  /** The pattern subscriptions' state as of `start`, if the matcher serves them (read after begin()). */
  patterns?(): Buffer | null;
}

/** Where a read snapshot's records go. */
export interface SnapshotSink {
  subscriptions(device: string, subs: DeviceSubscription[]): void;
  position(device: string, lat: number, lon: number): void;
  /** The pattern subscriptions' state (before any other record); without it the record is passed over. */
  patterns?(state: Buffer): void;
}

/** A snapshot that cannot be used: missing, damaged, of another deployment or format. */
export class SnapshotRefused extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
    readonly missing = false,
  ) {
    super(`snapshot ${path}: ${reason}`);
  }
}

export interface WriteOptions {
  /** Flush a block once it holds this many bytes; default 1 MiB. */
  blockBytes?: number;
  /** Awaited after each block is written: the writer's yield to the rest of the process. */
  betweenBlocks?: () => Promise<void> | void;
}

/** Writes a snapshot of `source` to `path` (through `<path>.tmp`); returns what it holds. */
export async function writeSnapshot(path: string, identity: SnapshotIdentity, source: SnapshotSource, options: WriteOptions = {}): Promise<SnapshotInfo> {
  const blockBytes = options.blockBytes ?? DEFAULT_BLOCK_BYTES;
  const tmp = `${path}.tmp`;
  await mkdir(dirname(path), { recursive: true });
  const fh = await open(tmp, 'w');
  const hash = createHash('sha256');
  let bytes = 0;
  const put = async (b: Buffer): Promise<void> => {
    hash.update(b);
    bytes += b.length;
    let at = 0;
    while (at < b.length) at += (await fh.write(b, at, b.length - at)).bytesWritten;
  };
  try {
    source.begin?.();
    const createdAt = new Date().toISOString();
    const header = Buffer.from(JSON.stringify({ format: FORMAT, identity, engine: source.engine, createdAt }), 'utf8');
    await put(Buffer.concat([MAGIC, u32(header.length), header]));
    const block = new BlockWriter(blockBytes);
    const flush = async (): Promise<void> => {
      if (block.size === 0) return;
      await put(block.take());
      await options.betweenBlocks?.();
    };
    let devices = 0;
    let subscriptions = 0;
    let positions = 0;
    const patterns = source.patterns?.() ?? null;
    if (patterns !== null) {
      block.patterns(patterns);
      await flush();
    }
    for (const [device, subs] of source.subscriptions()) {
      const list = [...subs];
      if (list.length === 0) continue;
      block.subscriptions(device, JSON.stringify(list));
      devices++;
      subscriptions += list.length;
      if (block.size >= blockBytes) await flush();
    }
    for (const [device, lat, lon] of source.positions()) {
      block.position(device, lat, lon);
      positions++;
      if (block.size >= blockBytes) await flush();
    }
    await flush();
    const start = source.start();
    const end = source.end();
    const trailer = Buffer.from(JSON.stringify({ start, end, devices, subscriptions, positions }), 'utf8');
    await put(Buffer.concat([u32(0), u32(trailer.length), trailer]));
    const digest = hash.digest();
    await fh.write(digest);
    bytes += digest.length;
    await fh.sync();
    await fh.close();
    await rename(tmp, path);
    await syncDir(dirname(path));
    return { identity, start, end, engine: source.engine, createdAt, devices, subscriptions, positions, bytes };
  } catch (err) {
    await fh.close().catch(() => {});
    await rm(tmp, { force: true }).catch(() => {});
    throw err;
  }
}

/**
 * Checks a snapshot whole (its hash, header, blocks and trailer) without handing out a record,
 * and that it is of `identity`. Throws SnapshotRefused saying why not.
 */
export async function checkSnapshot(path: string, identity: SnapshotIdentity): Promise<SnapshotInfo> {
  return scan(path, identity, null);
}

/**
 * Reads a snapshot into `sink`: checks it whole first (checkSnapshot), so a refused snapshot hands
 * out nothing; `check` false skips that for a caller that has just checked it. `betweenBlocks` is
 * awaited after each block's records.
 */
export async function readSnapshot(path: string, identity: SnapshotIdentity, sink: SnapshotSink, betweenBlocks?: () => Promise<void> | void, check = true): Promise<SnapshotInfo> {
  if (check) await checkSnapshot(path, identity);
  return scan(path, identity, { sink, betweenBlocks });
}

// ---- reading ----

async function scan(path: string, identity: SnapshotIdentity, apply: { sink: SnapshotSink; betweenBlocks?: () => Promise<void> | void } | null): Promise<SnapshotInfo> {
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new SnapshotRefused(path, code === 'ENOENT' ? 'no such file' : `cannot be opened (${code ?? String(err)})`, code === 'ENOENT');
  }
  try {
    const size = (await fh.stat()).size;
    const refuse = (reason: string): never => {
      throw new SnapshotRefused(path, reason);
    };
    if (size < MAGIC.length + 4 + 4 + 4 + HASH_BYTES) refuse(`too short to be a snapshot (${size} bytes)`);
    const reader = new FileReader(fh, size - HASH_BYTES);
    if (apply === null) {
      // The hash over everything before it, read in large chunks.
      const hash = createHash('sha256');
      const chunk = Buffer.allocUnsafe(READ_BYTES);
      for (let at = 0; at < size - HASH_BYTES; ) {
        const n = (await fh.read(chunk, 0, Math.min(READ_BYTES, size - HASH_BYTES - at), at)).bytesRead;
        if (n === 0) refuse('shorter than its size');
        hash.update(chunk.subarray(0, n));
        at += n;
      }
      const stored = Buffer.alloc(HASH_BYTES);
      await fh.read(stored, 0, HASH_BYTES, size - HASH_BYTES);
      if (!hash.digest().equals(stored)) refuse('damaged: its SHA-256 does not match its contents');
    }
    const magic = await reader.take(MAGIC.length, refuse);
    if (!magic.equals(MAGIC)) refuse('not a snapshot file (no AMBSNAP1 magic)');
    const header = parseJson(await reader.take((await reader.take(4, refuse)).readUInt32LE(0), refuse), 'header', refuse);
    if (header.format !== FORMAT) refuse(`format ${String(header.format)}, this version reads ${FORMAT}`);
    if (header.identity !== identity) refuse(`of ${JSON.stringify(header.identity)}, not of this matcher (${JSON.stringify(identity)})`);
    if (typeof header.engine !== 'string' || typeof header.createdAt !== 'string') refuse('header incomplete');
    let devices = 0;
    let subscriptions = 0;
    let positions = 0;
    for (;;) {
      const n = (await reader.take(4, refuse)).readUInt32LE(0);
      if (n === 0) break;
      if (n > MAX_BLOCK_BYTES) refuse(`a block claims ${n} bytes`);
      if (apply === null) {
        reader.skip(n, refuse); // the hash vouches for its records; they are parsed when applied
        continue;
      }
      const counts = readBlock(await reader.take(n, refuse), apply.sink, refuse);
      devices += counts.devices;
      subscriptions += counts.subscriptions;
      positions += counts.positions;
      await apply.betweenBlocks?.();
    }
    const trailer = parseJson(await reader.take((await reader.take(4, refuse)).readUInt32LE(0), refuse), 'trailer', refuse);
    if (reader.at !== size - HASH_BYTES) refuse('bytes after its trailer');
    if (typeof trailer.start !== 'string' || typeof trailer.end !== 'string') refuse('trailer incomplete');
    if (typeof trailer.devices !== 'number' || typeof trailer.subscriptions !== 'number' || typeof trailer.positions !== 'number') refuse('trailer incomplete');
    if (apply === null) ({ devices, subscriptions, positions } = trailer as { devices: number; subscriptions: number; positions: number });
    else if (trailer.devices !== devices || trailer.subscriptions !== subscriptions || trailer.positions !== positions) {
      refuse(`its trailer counts ${String(trailer.subscriptions)} subscriptions and ${String(trailer.positions)} positions, its blocks ${subscriptions} and ${positions}`);
    }
    return { identity, start: trailer.start as string, end: trailer.end as string, engine: header.engine as string, createdAt: header.createdAt as string, devices, subscriptions, positions, bytes: size };
  } finally {
    await fh.close();
  }
}

function readBlock(b: Buffer, sink: SnapshotSink, refuse: (reason: string) => never): { devices: number; subscriptions: number; positions: number } {
  let at = 0;
  let devices = 0;
  let subscriptions = 0;
  let positions = 0;
  const need = (n: number) => {
    if (at + n > b.length) refuse('a record runs past its block');
  };
  const str = (): string => {
    need(4);
    const n = b.readUInt32LE(at);
    at += 4;
    need(n);
    const s = b.toString('utf8', at, at + n);
    at += n;
    return s;
  };
  while (at < b.length) {
    const kind = b[at++];
    if (kind === SUBS) {
      const device = str();
      const json = str();
      let subs: unknown;
      try {
        subs = JSON.parse(json);
      } catch {
        refuse(`the subscriptions of ${JSON.stringify(device)} are not JSON`);
      }
      if (!Array.isArray(subs)) refuse(`the subscriptions of ${JSON.stringify(device)} are not a list`);
      devices++;
      subscriptions += (subs as unknown[]).length;
      sink.subscriptions(device, subs as DeviceSubscription[]);
    } else if (kind === PATTERNS) {
      need(4);
      const n = b.readUInt32LE(at);
      at += 4;
      need(n);
      // A reader that serves no patterns (a tool reading the records) passes over it.
      sink.patterns?.(b.subarray(at, at + n));
      at += n;
    } else if (kind === POSITION) {
      const device = str();
      need(16);
      const lat = b.readDoubleLE(at);
      const lon = b.readDoubleLE(at + 8);
      at += 16;
      positions++;
      sink.position(device, lat, lon);
    } else {
      refuse(`unknown record kind ${kind}`);
    }
  }
  return { devices, subscriptions, positions };
}

function parseJson(b: Buffer, what: string, refuse: (reason: string) => never): Record<string, unknown> {
  try {
    const v = JSON.parse(b.toString('utf8')) as unknown;
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // refused below
  }
  return refuse(`its ${what} is not a JSON object`);
}

/** Sequential reads of a file up to `limit`, through one buffer. */
class FileReader {
  at = 0;
  private buf = Buffer.alloc(0);
  private bufAt = 0;

  constructor(
    private readonly fh: FileHandle,
    private readonly limit: number,
  ) {}

  /** Moves past n bytes without reading them. */
  skip(n: number, refuse: (reason: string) => never): void {
    if (this.at + n > this.limit) refuse('truncated');
    const have = this.buf.length - this.bufAt;
    if (n <= have) this.bufAt += n;
    else {
      this.buf = Buffer.alloc(0);
      this.bufAt = 0;
    }
    this.at += n;
  }

  /** The next n bytes (a view valid until the next take). */
  async take(n: number, refuse: (reason: string) => never): Promise<Buffer> {
    if (this.at + n > this.limit) refuse('truncated');
    const have = this.buf.length - this.bufAt;
    if (have < n) {
      const want = Math.max(n, READ_BYTES);
      const next = Buffer.allocUnsafe(Math.max(n, Math.min(want, this.limit - this.at)));
      this.buf.copy(next, 0, this.bufAt);
      let filled = have;
      while (filled < next.length) {
        const r = (await this.fh.read(next, filled, next.length - filled, this.at + filled)).bytesRead;
        if (r === 0) refuse('truncated');
        filled += r;
      }
      this.buf = next;
      this.bufAt = 0;
    }
    const out = this.buf.subarray(this.bufAt, this.bufAt + n);
    this.bufAt += n;
    this.at += n;
    return out;
  }
}

// ---- writing ----

class BlockWriter {
  private buf: Buffer;
  size = 0;

  constructor(blockBytes: number) {
    this.buf = Buffer.allocUnsafe(Math.max(64, Math.min(blockBytes, DEFAULT_BLOCK_BYTES)) + 4096);
  }

  subscriptions(device: string, json: string): void {
    const d = Buffer.byteLength(device, 'utf8');
    const j = Buffer.byteLength(json, 'utf8');
    this.room(1 + 4 + d + 4 + j);
    this.buf[this.size++] = SUBS;
    this.str(device, d);
    this.str(json, j);
  }

  position(device: string, lat: number, lon: number): void {
    const d = Buffer.byteLength(device, 'utf8');
    this.room(1 + 4 + d + 16);
    this.buf[this.size++] = POSITION;
    this.str(device, d);
    this.buf.writeDoubleLE(lat, this.size);
    this.buf.writeDoubleLE(lon, this.size + 8);
    this.size += 16;
  }

  patterns(state: Buffer): void {
    this.room(1 + 4 + state.length);
    this.buf[this.size++] = PATTERNS;
    this.buf.writeUInt32LE(state.length, this.size);
    this.size += 4;
    state.copy(this.buf, this.size);
    this.size += state.length;
  }

  /** The block, length first; the writer starts a new one. */
  take(): Buffer {
    const out = Buffer.allocUnsafe(4 + this.size);
    out.writeUInt32LE(this.size, 0);
    this.buf.copy(out, 4, 0, this.size);
    this.size = 0;
    return out;
  }

  private str(s: string, n: number): void {
    this.buf.writeUInt32LE(n, this.size);
    this.size += 4;
    this.size += this.buf.write(s, this.size, n, 'utf8');
  }

  private room(n: number): void {
    if (this.size + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.size + n));
    this.buf.copy(next, 0, 0, this.size);
    this.buf = next;
  }
}

function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE(n, 0);
  return b;
}

async function syncDir(dir: string): Promise<void> {
  try {
    const d = await open(dir, 'r');
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  } catch {
    // Some filesystems refuse to sync a directory; the rename stands.
  }
}
