/**
 * One hub partition's thread (partitions.ts starts it): an embedded hub (its own engine, match
 * core and notification logs) for the devices that hash to this partition, served on the
 * MessagePort to the node's main thread and on a Unix socket to its gateway processes
 * (HubServer, inboxes included).
 */
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import { EmbeddedHub } from '../hub/embedded.js';
import { HubServer } from '../hub/hub-server.js';
import { MAX_EVENT_ORIGIN, portLink, setEventOrigin } from '../hub/link.js';
import { MatchCore } from '../matcher/core.js';
import { openEngine, openPatterns, patternTickMs } from '../matcher/engine.js';
import type { PartitionWorkerData } from './partitions.js';
import { rootLogger } from './log.js';
import { listenForGateways } from './thread-pool.js';

const data = workerData as PartitionWorkerData & { port: MessagePort };
const log = rootLogger(data.logLevel).child({ component: 'partition', partition: data.index });
// Events this partition makes (a pattern's match carries its steps' events as new objects) are
// numbered from an origin of its own, from the top, apart from the gateways' (numbered from 1) and
// the other partitions': a gateway's cache of events by number must never confuse two.
setEventOrigin(MAX_EVENT_ORIGIN - 1 - data.index);
const { engine, detail } = await openEngine(data.engine, data);
const patterns = await openPatterns(data);
const hub = new EmbeddedHub(new MatchCore(engine, data.maxSubscriptionsPerDevice, patterns), { retention: data.retention, dedupe: data.dedupe, engineDetail: detail, patternTickMs: patternTickMs(data.patternLatenessMs) });
log.info({ engine: engine.name, detail }, `partition ${data.index}: engine ${engine.name}: ${detail}`);
const hubServer = new HubServer(hub, log, hub);
hubServer.serve(portLink(data.port));
const stopListening = listenForGateways(data.socketPath, (link) => hubServer.serve(link), log);
parentPort!.on('message', (m: unknown) => {
  if (m !== 'stop') return;
  hubServer.close();
  stopListening();
  // The engine lets go of its GPU before the thread ends.
  void hub.close().finally(() => {
    data.port.close();
    parentPort!.close();
  });
});
