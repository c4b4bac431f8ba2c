/**
 * The matcher's blocking reader of its command stream: XREAD BLOCK on a connection of its own,
 * and a second connection to the same server that can end a blocked read at once (CLIENT
 * UNBLOCK: a standby that took the lease leads without waiting out the block, a stop does not
 * wait for it).
 *
 * On a plain Redis both connections go to the server and wait for it as long as it takes. On a
 * Redis Cluster a blocking command and its UNBLOCK must reach the same node, which a cluster
 * client does not promise: the reader asks the cluster which master serves the stream's slot
 * (CLUSTER SLOTS) and connects to that node directly. When the node fails or stops serving the
 * slot (a failover promoted its replica: the old node answers MOVED, or is gone), the read fails,
 * the connections are dropped and the next read asks again.
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { type Conn, type RedisSource, closeConnection, connectAll, isClusterSource, openConnection } from './connection.js';
import { keySlot } from './keys.js';

/** One stream's entries as XREAD returns them with buffers: [id, [field, value, ...]]. */
export type StreamEntries = [Buffer, Buffer[]][];

export class StreamReader {
  private conn: Redis | null = null;
  private ctl: Redis | null = null;
  private clientId = -1;
  private opening: Promise<void> | null = null;
  private closed = false;

  /** `cmd`: the process's connection (a cluster client on a cluster), used to find the stream's node. */
  constructor(
    private readonly source: RedisSource,
    private readonly cmd: Conn,
    private readonly key: string,
    private readonly role: string,
    private readonly component: string,
    private readonly log: Logger | undefined,
  ) {}

  /** Connects (to the stream's master on a cluster). */
  open(): Promise<void> {
    return (this.opening ??= this.connect().catch((err: unknown) => {
      this.drop();
      throw err;
    }));
  }

  private async connect(): Promise<void> {
    let conn: Redis;
    let ctl: Redis;
    if (isClusterSource(this.source)) {
      const node = await this.masterOfKey();
      const base: RedisOptions = { ...this.source.options?.redisOptions, host: node.host, port: node.port };
      // No reconnects: a node that went away may no longer serve the slot; the next read asks again.
      const own: RedisOptions = { maxRetriesPerRequest: 0, retryStrategy: () => null };
      conn = openConnection(base, `${this.role}-read`, this.component, this.log, own);
      ctl = openConnection(base, `${this.role}-ctl`, this.component, this.log, own);
    } else {
      // Blocking reads wait as long as it takes for Redis to come back.
      conn = openConnection(this.source, `${this.role}-read`, this.component, this.log, { maxRetriesPerRequest: null });
      ctl = openConnection(this.source, `${this.role}-ctl`, this.component, this.log);
    }
    this.conn = conn;
    this.ctl = ctl;
    await connectAll(this.component, [conn, ctl]);
    this.clientId = Number(await conn.client('ID'));
    // Closed while connecting: these connections were opened after the close and end here.
    if (this.closed) {
      conn.disconnect();
      ctl.disconnect();
    }
  }

  /** The master serving the stream's slot now, from CLUSTER SLOTS through the cluster client. */
  private async masterOfKey(): Promise<{ host: string; port: number }> {
    const slot = keySlot(this.key);
    const c = this.cmd as Cluster;
    const ranges = (await c.cluster('SLOTS')) as unknown as [number, number, [string, number, ...unknown[]], ...unknown[]][];
    for (const [from, to, master] of ranges) {
      if (slot >= from && slot <= to) return { host: master[0] === '' ? '127.0.0.1' : String(master[0]), port: Number(master[1]) };
    }
    throw new Error(`${this.component}: no master serves slot ${slot} of ${this.key}`);
  }

  /**
   * XREAD COUNT `count` BLOCK `blockMs` after `from`: the entries, or null when the block ended
   * with none (or was woken). A failure drops the connections; the next read reconnects.
   */
  async read(count: number, blockMs: number, from: string): Promise<StreamEntries | null> {
    if (this.closed) throw new Error(`${this.component}: stream reader closed`);
    try {
      await this.open();
      const reply = (await this.conn!.xreadBuffer('COUNT', count, 'BLOCK', blockMs, 'STREAMS', this.key, from)) as [Buffer, StreamEntries][] | null;
      return reply === null || reply.length === 0 ? null : reply[0][1];
    } catch (err) {
      if (isClusterSource(this.source)) this.drop();
      throw err;
    }
  }

  /** Ends a blocked read now (it returns null); nothing when none is blocked. */
  async wake(): Promise<void> {
    if (this.ctl === null || this.clientId < 0 || this.ctl.status !== 'ready') return;
    await this.ctl.client('UNBLOCK', this.clientId);
  }

  /** Whether the reading connection is up. */
  get ready(): boolean {
    return this.conn?.status === 'ready';
  }

  private drop(): void {
    this.conn?.disconnect();
    this.ctl?.disconnect();
    this.conn = this.ctl = null;
    this.clientId = -1;
    this.opening = null;
  }

  /** Quits both connections (pending replies first). */
  async close(): Promise<void> {
    this.closed = true;
    const conns = [this.conn, this.ctl].filter((c): c is Redis => c !== null);
    await Promise.all(conns.map((c) => closeConnection(c)));
  }

  /** Drops both connections at once (a blocked read fails). */
  disconnect(): void {
    this.closed = true;
    this.conn?.disconnect();
    this.ctl?.disconnect();
  }
}
