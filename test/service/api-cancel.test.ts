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
import { DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import { OpsService } from '../../api/gen/ambit/v1/ops_pb.js';
import { PublisherService } from '../../api/gen/ambit/v1/publisher_pb.js';
import { silentLogger } from '../../services/process/log.js';
import { MatchCore } from '../../services/matcher/core.js';
import { Metrics } from '../../services/process/metrics.js';
import { grpcClient, grpcServerDefinition } from '../../api/rpc.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('api: a client stream past its deadline', () => {
  it('BulkPublish: messages still queued when the deadline passes are not published', async () => {
    const hub = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: { maxIdBytes: 1024 } })));
    const publish = hub.publish.bind(hub);
    const published: string[] = [];
    hub.publish = async (events: readonly Event[]) => {
      await sleep(300); // a slow matcher: the first message's apply outlives the caller's deadline
      published.push(...events.map((e) => e.id));
      return publish(events);
    };
    const authority = new TokenAuthority('api-cancel-test-secret-0123456789abcdef');
    const metrics = new Metrics(hub, 'test');
    const gateway = new Gateway(hub, authority, DEFAULT_LIMITS, metrics, silentLogger());
    const server = new grpc.Server();
    const h = gateway.handlers();
    server.addService(grpcServerDefinition(DeviceService), h.device);
    server.addService(grpcServerDefinition(PublisherService), h.publisher);
    server.addService(grpcServerDefinition(OpsService), h.ops);
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
        setTimeout(() => {
          call.write({ events: [ev('m2')] });
          call.write({ events: [ev('m3')] });
        }, 50);
      });
      const err = await status;
      assert.equal(err?.code, grpc.status.DEADLINE_EXCEEDED);
      await sleep(800); // m1's apply finishes; nothing queued behind it may follow
      assert.deepEqual(published, ['m1']);
    } finally {
      client.close();
      server.forceShutdown();
      await metrics.close();
      await hub.close();
    }
  });
});
