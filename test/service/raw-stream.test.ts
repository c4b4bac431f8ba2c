/**
 * Notifications written to the HTTP/2 stream under a device's call (services/edge/raw-stream.ts),
 * a batch per write, against real grpc-js clients: the pinned grpc-js has the call shape the
 * gateway looks for (if an upgrade changes it, this fails while streams quietly fall back to
 * grpc-js); messages written directly and through grpc-js arrive whole and in write order; and
 * nodes with each way of writing a device stream (the gateway's own transport, grpc-js with direct
 * writes on and off) deliver the same notifications, in order, with subscription replies
 * interleaved and a device that stops reading catching up.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { create, toBinary } from '@bufbuild/protobuf';
import { grpcDefinition, grpcServerDefinition } from '../../api/rpc.js';
import { type ConnectResponse, ConnectResponseSchema, DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import { grpcMessages, rawStreamOf } from '../../services/edge/raw-stream.js';
import type { ServerConfig } from '../../services/process/config.js';
import { Clients, DeviceStream, type Init, type TestServer, clientStream, startTestServer } from '../support/grpc.js';

const welcome = (deviceId: string) => create(ConnectResponseSchema, { message: { case: 'welcome', value: { deviceId, resumeToken: '', missed: 0n } } });
const reply = (requestId: string) => create(ConnectResponseSchema, { message: { case: 'reply', value: { requestId, status: { code: 0, message: '' } } } });
const bytes = (m: ConnectResponse) => toBinary(ConnectResponseSchema, m);

/** Writes `m` through grpc-js and resolves once its Writable holds nothing more (the message went to HTTP/2). */
function written(call: grpc.ServerDuplexStream<unknown, ConnectResponse>, m: ConnectResponse): Promise<void> {
  return new Promise((resolve) => call.write(m, () => resolve()));
}

describe('raw stream: notifications written under grpc-js', { timeout: 60_000 }, () => {
  it('the pinned grpc-js exposes the HTTP/2 stream of a call; direct and grpc-js writes arrive whole and in order', async () => {
    const server = new grpc.Server();
    let found = false;
    server.addService(grpcServerDefinition(DeviceService), {
      connect: (call: grpc.ServerDuplexStream<unknown, ConnectResponse>) => {
        call.once('data', () => {
          void (async () => {
            // grpc-js sends the headers with it. As a session does: directly only once grpc-js holds nothing of ours.
            await written(call, welcome('d1'));
            const raw = rawStreamOf(call);
            found = raw !== null;
            if (raw === null) return call.end();
            assert.equal(call.writableLength, 0);
            raw.write(grpcMessages([bytes(welcome('direct-1')), bytes(welcome('direct-2')), new Uint8Array(0)]));
            await written(call, reply('after'));
            assert.equal(call.writableLength, 0);
            raw.write(grpcMessages([bytes(welcome('x'.repeat(70_000)))])); // larger than one HTTP/2 frame
            call.end();
          })();
        });
      },
    });
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
    const Client = grpc.makeGenericClientConstructor(grpcDefinition(DeviceService), 'Device');
    const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    try {
      const call = (client as unknown as { connect(): grpc.ClientDuplexStream<unknown, ConnectResponse> }).connect();
      const got: string[] = [];
      const done = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
      call.on('data', (m: ConnectResponse) => got.push(m.message.case === 'welcome' ? `w:${m.message.value.deviceId.slice(0, 10)}` : m.message.case === 'reply' ? `r:${m.message.value.requestId}` : `?:${m.message.case}`));
      call.on('error', () => {});
      call.write({ message: { case: 'hello', value: { resumeToken: '' } } });
      call.end();
      const status = await done;
      assert.ok(found, 'rawStreamOf finds the HTTP/2 stream under the call (grpc-js changed its call objects if not)');
      assert.equal(status.code, grpc.status.OK, status.details);
      assert.deepEqual(got, ['w:d1', 'w:direct-1', 'w:direct-2', '?:undefined', 'r:after', 'w:xxxxxxxxxx']);
    } finally {
      client.close();
      server.forceShutdown();
    }
  });

  const nodes: [string, Partial<ServerConfig>][] = [
    ['the gateway serving device streams itself', { deviceStreams: 'http2' }],
    ['grpc-js carrying device streams, AMBIT_DIRECT_WRITES=1', { deviceStreams: 'grpc-js', directWrites: true }],
    ['grpc-js carrying device streams, AMBIT_DIRECT_WRITES=0', { deviceStreams: 'grpc-js', directWrites: false }],
  ];
  for (const [label, config] of nodes) {
    describe(`a node with ${label}`, () => {
      let srv: TestServer;
      let clients: Clients;
      let pubMd: Init;
      before(async () => {
        srv = await startTestServer(config);
        clients = srv.clients();
        pubMd = srv.meta('pub', ['publish']);
      });
      after(async () => {
        assert.deepEqual(srv.unexpectedErrors(), []);
        await srv.stop();
      });
      const publish = async (from: number, n: number) => {
        const events = Array.from({ length: n }, (_, i) => ({ id: `e${from + i}`, position: { lat: 0, lon: 0 }, attributes: {} }));
        const messages = [];
        for (let k = 0; k < n; k += 500) messages.push({ events: events.slice(k, k + 500) });
        const res = await clientStream(clients.publisher, 'bulkPublish', messages, pubMd);
        assert.equal(res.accepted, BigInt(n));
      };

      it('delivers every notification once, in order, with replies in between, to a device that reads late', async () => {
        const { stream } = await DeviceStream.open(clients, srv.token('raw-dev', ['device']));
        await stream.subscribeOk({ id: 'all', filters: [{}] });
        await publish(0, 300);
        const requests = [stream.unsubscribe('none-1'), stream.unsubscribe('none-2')];
        stream.call.pause(); // stops reading: HTTP/2 flow control holds the rest in the hub
        await publish(300, 1200);
        stream.call.resume();
        const ids: string[] = [];
        for (let k = 0; k < 1500; k++) ids.push((await stream.next('notification', 10_000)).event!.id);
        assert.deepEqual(ids, Array.from({ length: 1500 }, (_, i) => `e${i}`));
        for (const r of await Promise.all(requests)) assert.equal(r.code, grpc.status.NOT_FOUND);
        const seqs = stream.received.filter((m) => m.message.case === 'notification').map((m) => Number((m.message.value as { deliveryId: string }).deliveryId.split('-')[1]));
        assert.deepEqual(seqs, Array.from({ length: 1500 }, (_, i) => i + 1));
        stream.call.end();
        await stream.ended;
      });
    });
  }
});
