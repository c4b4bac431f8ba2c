/**
 * The contract in band mode must hold for every engine the band allows (X2): engines that decide
 * each area test anywhere inside the band, as a float32 GPU kernel does or as far out as the band
 * reaches. If one of these fails, a band-mode contract case depends on an in-band decision.
 */
import { DistortedMatcher, float32Area, shifted } from './support/distorted.js';
import { runContract } from './support/contract.js';

runContract('test model: float32 squared-chord distance', (o) => new DistortedMatcher(float32Area, o), { band: true });
runContract('test model: every circle fattened by 0.99·tol', (o) => new DistortedMatcher(shifted(0.99), o), { band: true });
runContract('test model: every circle thinned by 0.99·tol', (o) => new DistortedMatcher(shifted(-0.99), o), { band: true });
