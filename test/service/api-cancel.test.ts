/**
 * A client-streaming call the caller gave up on (deadline passed) must not go on applying what it
 * had sent: the gateway in front of a hub whose publish takes a while.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { DEFAULT_LIMITS } from '../../src/model/limits.js';
import type { Event } from '../../src/model/types.js';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { EmbeddedHub } from '../../services/hub/embedded.js';
import { Gateway } from '../../services/edge/gateway.js';
import { OpsService } from '../../api/gen/ambit/v1/ops_pb.js';
import { PublisherService } from '../../api/gen/ambit/v1/publisher_pb.js';
import { silentLogger } from '../../services/process/log.js';
import { MatchCore } from '../../services/matcher/core.js';
import { Metrics } from '../../services/process/metrics.js';
import { grpcClient } from '../../api/rpc.js';
import { ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';

describe('api: a client stream past its deadline', () => {
  it('BulkPublish: messages still queued when the deadline passes are not published', async () => {
    const hub = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS })));
    const publish = hub.publish.bind(hub);
    // A matcher held by the test: the first message's apply outlives the caller's deadline.
    const applied: string[] = [];
    let entered!: () => void;
    const firstApply = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let returned!: () => void;
    const firstReturned = new Promise<void>((r) => (returned = r));
    hub.publish = async (events: readonly Event[]) => {
      applied.push(...events.map((e) => e.id));
      entered();
      await gate;
      const r = await publish(events);
      returned();
      return r;
    };
    const authority = new TokenAuthority('api-cancel-test-secret-0123456789abcdef');
    const metrics = new Metrics(hub, 'test');
    const gateway = new Gateway(hub, authority, DEFAULT_LIMITS, metrics, silentLogger());
    const server = new grpc.Server();
    gateway.addTo(server);
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
    const Client = grpcClient(PublisherService);
    const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    try {
      const md = new grpc.Metadata();
      md.set('authorization', `Bearer ${authority.issue({ subject: 'pub', scopes: [SCOPES.publish] })}`);
      const ev = (id: string) => ({ id, position: { lat: 45, lon: 9 }, attributes: {} });
      const status = new Promise<grpc.ServiceError | null>((resolve) => {
        const call = (client as unknown as { bulkPublish: (md: grpc.Metadata, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null) => void) => grpc.ClientWritableStream<unknown> }).bulkPublish(
          md,
          { deadline: Date.now() + 150 },
          (err) => resolve(err),
        );
        call.write({ events: [ev('m1')] });
        // Once m1's apply runs, m2 and m3 queue behind it.
        void firstApply.then(() => {
          call.write({ events: [ev('m2')] });
          call.write({ events: [ev('m3')] });
        });
      });
      const err = await status;
      assert.equal(err?.code, grpc.status.DEADLINE_EXCEEDED);
      // A call on the same connection after the deadline: the server has seen the first one end
      // (its reset, or its own deadline timer, comes first on the connection).
      const ops = new (grpcClient(OpsService))(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { channelOverride: client.getChannel() });
      const opsMd = new grpc.Metadata();
      opsMd.set('authorization', `Bearer ${authority.issue({ subject: 'ops', scopes: [SCOPES.ops] })}`);
      await new Promise((resolve, reject) => (ops as unknown as { getStats: (r: object, md: grpc.Metadata, cb: (e: unknown, r: unknown) => void) => void }).getStats({}, opsMd, (e, r) => (e ? reject(e) : resolve(r))));
      release(); // m1's apply finishes; nothing queued behind it may follow
      await firstReturned;
      // The gateway would start the next apply in the promise turns right after m1's returns.
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(applied, ['m1']);
    } finally {
      client.close();
      server.forceShutdown();
      await metrics.close();
      await hub.close();
    }
  });
});
