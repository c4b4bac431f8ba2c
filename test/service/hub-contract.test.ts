/** The hub contract on the embedded, memory-only hub (the Redis hub runs it in redis-hub.test.ts). */
import { ENGINES } from '../../src/engines/index.js';
import { EmbeddedHub } from '../../services/embedded.js';
import { MatchCore } from '../../services/matching.js';
import { runHubContract } from '../support/hub-contract.js';

runHubContract('embedded', async (setup) => {
  const core = new MatchCore(ENGINES.fast({ limits: { maxIdBytes: 1024 } }), setup.maxSubscriptionsPerDevice);
  const hub = new EmbeddedHub(core, { retention: setup.retention });
  return { hub, dispose: () => hub.close() };
});
