/** The reference engine runs the shared contract; it is the oracle everything else is compared with. */
import { ReferenceMatcher } from '../src/engines/reference.js';
import { runContract } from './support/contract.js';

runContract('reference', (o) => new ReferenceMatcher(o));
