/**
 * Mutual TLS (AMBIT_TLS_CLIENT_CA, AMBIT_TLS_CLIENT_CERT, AMBIT_TLS_CLIENT_SCOPES): certificates
 * made here with openssl (a client CA, a client certificate it signed, one it did not), real gRPC
 * clients and WebSocket clients over TLS. Required: no certificate or a foreign one is refused in
 * the handshake; a verified one without a token is its CN with the configured scopes, a token
 * beside it decides; revoking the subject cuts it. Optional: tokens work without a certificate.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { WebSocket } from 'ws';
import { WS_PATH, WS_SUBPROTOCOL, WS_BEARER_PREFIX, FLAG_END } from '../../api/websocket.js';
import { configFromEnv } from '../../services/process/config.js';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { PublisherService } from '../../api/gen/ambit/v1/publisher_pb.js';
import { type Init, Status, type TestServer, clientStream, expectStatus, rawConnect, startTestServer, unary } from '../support/grpc.js';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema, ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';

interface Pem {
  cert: Buffer;
  key: Buffer;
}

describe('mutual TLS', { timeout: 60_000 }, () => {
  let dir = '';
  let server: Pem;
  let clientCa: Pem;
  let fleet: Pem;
  let rogue: Pem;
  let opensslMissing = '';

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'ambit-mtls-'));
    const ossl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe', cwd: dir });
    const read = (name: string): Pem => ({ cert: readFileSync(join(dir, `${name}.crt`)), key: readFileSync(join(dir, `${name}.key`)) });
    const selfSigned = (name: string, cn: string, ext: string[] = []) => {
      ossl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', `/CN=${cn}`, ...ext, '-keyout', `${name}.key`, '-out', `${name}.crt`);
      return read(name);
    };
    try {
      server = selfSigned('server', 'localhost', ['-addext', 'subjectAltName=DNS:localhost']);
      clientCa = selfSigned('client-ca', 'ambit test client CA');
      rogue = selfSigned('rogue', 'fleet-1');
      ossl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=fleet-1', '-keyout', 'fleet.key', '-out', 'fleet.csr');
      ossl('x509', '-req', '-in', 'fleet.csr', '-CA', 'client-ca.crt', '-CAkey', 'client-ca.key', '-CAcreateserial', '-days', '1', '-out', 'fleet.crt');
      fleet = read('fleet');
    } catch (err) {
      opensslMissing = `openssl could not make the certificates: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
    }
  });

  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Clients over TLS trusting the server's certificate, with `who`'s client certificate (or none). */
  const clientsOf = (srv: TestServer, who: Pem | null) =>
    srv.clients(who === null ? grpc.credentials.createSsl(server.cert) : grpc.credentials.createSsl(server.cert, who.key, who.cert), { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost', 'grpc.use_local_subchannel_pool': 1 });
  const event = (id: string): Init => ({ id, position: { lat: 0, lon: 0 }, attributes: {} });

  /** A WebSocket device stream over TLS: resolves with the server's end of stream, or rejects when the handshake fails. */
  const wsEnd = (srv: TestServer, who: Pem | null, token: string | null): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const protocols = [WS_SUBPROTOCOL, ...(token === null ? [] : [`${WS_BEARER_PREFIX}${token}`])];
      const ws = new WebSocket(`wss://localhost:${srv.server.webPort}${WS_PATH}`, protocols, { ca: server.cert, ...(who === null ? {} : { cert: who.cert, key: who.key }) });
      ws.on('error', reject);
      ws.on('open', () => ws.send(Buffer.from([FLAG_END])));
      ws.on('message', (data: Buffer) => {
        if (data[0] === FLAG_END) resolve(JSON.parse(data.subarray(1).toString('utf8')));
      });
    });

  it('required: the handshake refuses no certificate and a foreign one; a verified one stands in for a token with its scopes', async (t) => {
    if (opensslMissing !== '') return t.skip(opensslMissing);
    const srv = await startTestServer({ tls: { cert: server.cert, key: server.key, clientCa: clientCa.cert, requireClientCert: true }, tlsClientScopes: ['publish', 'device', 'location:any'], webPort: 0 });
    try {
      const opsMd = srv.meta('ops', ['ops']);
      const deadline = () => ({ deadline: Date.now() + 3000 });
      await expectStatus(unary(clientsOf(srv, null).ops, 'getStats', {}, opsMd, deadline()), Status.UNAVAILABLE);
      await expectStatus(unary(clientsOf(srv, rogue).ops, 'getStats', {}, opsMd, deadline()), Status.UNAVAILABLE);
      const c = clientsOf(srv, fleet);
      // No token: the certificate's CN with the configured scopes.
      assert.equal(((await unary(c.publisher, 'publish', { event: event('m-1') }, new grpc.Metadata())) as Init).eventId, 'm-1');
      const r = (await clientStream(c.device, 'updateLocations', [{ updates: [{ deviceId: 'truck-9', location: { lat: 1, lon: 2 } }] }], new grpc.Metadata())) as Init;
      assert.equal(r.accepted, 1n);
      await expectStatus(unary(c.ops, 'getStats', {}, new grpc.Metadata()), Status.PERMISSION_DENIED);
      // A token beside the certificate decides who calls.
      assert.ok(((await unary(c.ops, 'getStats', {}, opsMd)) as Init).locationUpdates >= 1n);
      await expectStatus(unary(c.publisher, 'publish', { event: event('m-2') }, srv.meta('someone', ['device'])), Status.PERMISSION_DENIED);
      // WebSocket: the same rules on its TLS port. No certificate: no handshake; the certificate alone is device fleet-1.
      await assert.rejects(wsEnd(srv, null, srv.token('ws-m', ['device'])));
      await assert.rejects(wsEnd(srv, rogue, srv.token('ws-m', ['device'])));
      assert.deepEqual(await wsEnd(srv, fleet, null), {});
      assert.deepEqual(await wsEnd(srv, fleet, srv.token('ws-m', ['device'])), {});
      // A gRPC device stream on the certificate alone: welcomed as fleet-1.
      const hello = Buffer.from(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'hello', value: {} } })));
      const { messages, status } = await rawConnect(c, [hello], new grpc.Metadata());
      assert.equal(status.code, Status.OK, status.details);
      const welcome = fromBinary(ConnectResponseSchema, messages[0]);
      assert.ok(welcome.message.case === 'welcome' && welcome.message.value.deviceId === 'fleet-1');
      // The certificate's CN is the device: its own location, set without a token, is fleet-1's.
      await unary(c.device, 'updateLocation', { location: { lat: 45.5, lon: 9.25 } }, new grpc.Metadata());
      const info = (await unary(c.ops, 'getDeviceSubscriptions', { deviceId: 'fleet-1' }, opsMd)) as Init;
      assert.deepEqual([info.location?.lat, info.location?.lon], [45.5, 9.25]);
      // The web port's Connect calls: the certificate alone, as on gRPC.
      const web = createClient(PublisherService, createConnectTransport({ baseUrl: `https://localhost:${srv.server.webPort}`, httpVersion: '1.1', nodeOptions: { ca: server.cert, cert: fleet.cert, key: fleet.key } }));
      assert.equal((await web.publish({ event: { id: 'm-web', position: { lat: 0, lon: 0 }, attributes: {} } })).eventId, 'm-web');
      // Revoking the subject cuts the certificate too.
      await unary(c.ops, 'revokeTokens', { subject: 'fleet-1' }, opsMd);
      await expectStatus(unary(c.publisher, 'publish', { event: event('m-3') }, new grpc.Metadata()), Status.UNAUTHENTICATED);
      assert.deepEqual(srv.unexpectedErrors(), []);
    } finally {
      await srv.stop();
    }
  });

  it('optional: tokens work without a certificate; a foreign certificate is no identity; without client scopes a certificate alone authorizes nothing', async (t) => {
    if (opensslMissing !== '') return t.skip(opensslMissing);
    const srv = await startTestServer({ tls: { cert: server.cert, key: server.key, clientCa: clientCa.cert, requireClientCert: false }, tlsClientScopes: ['publish'] });
    const plainCa = await startTestServer({ tls: { cert: server.cert, key: server.key, clientCa: clientCa.cert, requireClientCert: true } });
    try {
      const pubMd = srv.meta('pub', ['publish']);
      assert.equal(((await unary(clientsOf(srv, null).publisher, 'publish', { event: event('o-1') }, pubMd)) as Init).eventId, 'o-1');
      assert.equal(((await unary(clientsOf(srv, fleet).publisher, 'publish', { event: event('o-2') }, new grpc.Metadata())) as Init).eventId, 'o-2');
      await expectStatus(unary(clientsOf(srv, rogue).publisher, 'publish', { event: event('o-3') }, new grpc.Metadata()), Status.UNAUTHENTICATED);
      assert.equal(((await unary(clientsOf(srv, rogue).publisher, 'publish', { event: event('o-4') }, pubMd)) as Init).eventId, 'o-4');
      // Required certificates but no AMBIT_TLS_CLIENT_SCOPES: the certificate admits the connection, a token is still needed.
      await expectStatus(unary(clientsOf(plainCa, fleet).publisher, 'publish', { event: event('o-5') }, new grpc.Metadata()), Status.UNAUTHENTICATED);
      assert.equal(((await unary(clientsOf(plainCa, fleet).publisher, 'publish', { event: event('o-6') }, plainCa.meta('pub', ['publish']))) as Init).eventId, 'o-6');
      assert.deepEqual(srv.unexpectedErrors(), []);
    } finally {
      await srv.stop();
      await plainCa.stop();
    }
  });

  it('configuration: the client CA needs TLS, the mode and scopes need the CA, scopes must be known', (t) => {
    if (opensslMissing !== '') return t.skip(opensslMissing);
    const files = { AMBIT_TLS_CERT: join(dir, 'server.crt'), AMBIT_TLS_KEY: join(dir, 'server.key'), AMBIT_TLS_CLIENT_CA: join(dir, 'client-ca.crt') };
    const c = configFromEnv({ ...files, AMBIT_TLS_CLIENT_CERT: 'optional', AMBIT_TLS_CLIENT_SCOPES: 'publish, location:any' });
    assert.equal(c.tls?.requireClientCert, false);
    assert.deepEqual(c.tlsClientScopes, ['publish', 'location:any']);
    assert.equal(configFromEnv(files).tls?.requireClientCert, true, 'required by default');
    assert.throws(() => configFromEnv({ AMBIT_TLS_CLIENT_CA: files.AMBIT_TLS_CLIENT_CA }), /AMBIT_TLS_CLIENT_CA needs AMBIT_TLS_CERT/);
    assert.throws(() => configFromEnv({ ...files, AMBIT_TLS_CLIENT_CERT: 'sometimes' }), /required or optional/);
    assert.throws(() => configFromEnv({ AMBIT_TLS_CERT: files.AMBIT_TLS_CERT, AMBIT_TLS_KEY: files.AMBIT_TLS_KEY, AMBIT_TLS_CLIENT_SCOPES: 'publish' }), /needs AMBIT_TLS_CLIENT_CA/);
    assert.throws(() => configFromEnv({ ...files, AMBIT_TLS_CLIENT_SCOPES: 'publish,root' }), /AMBIT_TLS_CLIENT_SCOPES must be/);
  });
});
