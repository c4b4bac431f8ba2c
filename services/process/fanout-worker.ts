/**
 * One fan-out shard's thread (fanout-shards.ts starts it): an InboxStore for the devices that
 * hash to this shard, fed by the hub over a MessagePort (serveShard) and served to gateway
 * processes over a Unix socket (HubServer with inboxes only).
 */
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import { serveShard } from '../hub/fanout-shard.js';
import { HubServer } from '../hub/hub-server.js';
import { InboxStore } from '../hub/inboxes.js';
import { portLink } from '../hub/link.js';
import type { ShardWorkerData } from './fanout-shards.js';
import { rootLogger } from './log.js';
import { listenForGateways } from './thread-pool.js';

const data = workerData as ShardWorkerData & { port: MessagePort };
const log = rootLogger(data.logLevel).child({ component: 'fanout-shard', shard: data.index });
const store = new InboxStore({ retention: data.retention });
const stopServing = serveShard(store, portLink(data.port), log);
const hubServer = new HubServer(null, log, store);
const stopListening = listenForGateways(data.socketPath, (link) => hubServer.serve(link), log);
parentPort!.on('message', (m: unknown) => {
  if (m !== 'stop') return;
  stopServing();
  hubServer.close();
  stopListening();
  store.close();
  data.port.close();
  parentPort!.close();
});
