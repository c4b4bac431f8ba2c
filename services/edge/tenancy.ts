/**
 * Tenants (docs/service.md "Tenants"; a token's tenant is read by auth.ts): the ids, the reserved
 * tag and the operator rules of a tenant, for the gateway. A named tenant's ids are
 * `<tenant>/<id>` and its events and filters carry `tenant:<name>`; the default tenant's ids stay
 * as given (without '/'), its events and filters carry `tenant:`. With tenants off every method
 * gives back what it was given. convert.ts leaves the tag and the prefix out of what clients see.
 */
import type { Event } from '../../src/model/types.js';
import { ValidationError } from '../../src/model/errors.js';
import { type Limits, checkId } from '../../src/model/limits.js';
import type { DeviceSubscription } from '../hub/port.js';
import { AuthError, type Principal } from './auth.js';
import { TENANT_TAG } from './convert.js';

export class Tenancy {
  constructor(
    /** Tenants on (AMBIT_TENANT_CLAIM). */
    readonly on: boolean,
    private readonly limits: Limits,
  ) {}

  /** What a tenant's ids begin with: `<tenant>/` ('' for the default tenant, and with tenants off). */
  prefix(p: Principal): string {
    return this.on && p.tenant !== undefined && p.tenant !== '' ? `${p.tenant}/` : '';
  }

  /** An id as the principal's tenant gave it (the stored one without `<tenant>/`). */
  local(p: Principal, id: string): string {
    const own = this.prefix(p);
    return own !== '' && id.startsWith(own) ? id.slice(own.length) : id;
  }

  /**
   * With tenants on, an id of the default tenant (device, subject, event) may not hold '/': a
   * named tenant's ids are `<tenant>/<id>`, and one of the default tenant's must never be taken
   * for one of them. As given with tenants off.
   */
  free(field: string, id: string): string {
    if (this.on && id.includes('/')) throw new ValidationError(field, `must not contain '/' in a deployment with tenants (a tenant's ids are <tenant>/<id>), got ${JSON.stringify(id.slice(0, 64))}`);
    return id;
  }

  /** A device an operator names: within the operator's tenant. */
  device(p: Principal, deviceId: string): string {
    checkId('device_id', deviceId, this.limits);
    return checkId('device_id', this.prefix(p) + deviceId, this.limits);
  }

  /** Calls about the whole deployment: its own operators only, not a tenant's. */
  deploymentOps(p: Principal, call: string): void {
    if (this.prefix(p) !== '') throw new AuthError('PERMISSION_DENIED', `${call} is for the deployment's operators; a tenant's operators manage their devices (GetStats of their tenant, ListDevices, GetDeviceSubscriptions, DeleteSubscription, PurgeDevice, RevokeTokens by subject)`);
  }

  /** The reserved tag of the principal's tenant (null with tenants off). */
  private tag(p: Principal): string | null {
    return this.on ? `${TENANT_TAG}${p.tenant ?? ''}` : null;
  }

  /** Tags with the tenant's added (kept sorted and distinct, as T2 keeps them); `max` the limit that applies. */
  private withTag(field: string, tags: readonly string[] | undefined, tag: string, max: number): string[] {
    const out = [...(tags ?? [])];
    if (out.length + 1 > max) throw new ValidationError(`${field}.tags`, `must have at most ${max - 1} tags in a deployment with tenants (one is the tenant's), got ${out.length}`);
    let i = 0;
    while (i < out.length && out[i] < tag) i++;
    out.splice(i, 0, tag);
    return out;
  }

  /** A published event in its tenant: `<tenant>/` before its id, the tenant's tag among its tags. */
  event(e: Event, p: Principal, field: string): Event {
    const tag = this.tag(p);
    if (tag === null) return e;
    const own = this.prefix(p);
    if (own !== '') e.id = checkId(`${field}.id`, own + e.id, this.limits);
    else this.free(`${field}.id`, e.id);
    e.tags = this.withTag(field, e.tags, tag, this.limits.maxTagsPerEvent);
    return e;
  }

  /** A device's subscription in its tenant: the tenant's tag on every filter (a pattern's too). */
  subscription(sub: DeviceSubscription, p: Principal, field: string): DeviceSubscription {
    const tag = this.tag(p);
    if (tag === null) return sub;
    const max = this.limits.maxTagsPerFilter;
    const tagged = <F extends { tags?: string[] }>(f: F, at: string): F => ({ ...f, tags: this.withTag(at, f.tags, tag, max) });
    const pattern = sub.pattern;
    return {
      ...sub,
      filters: sub.filters.map((f, i) => tagged(f, `${field}.filters[${i}]`)),
      ...(pattern === undefined
        ? {}
        : {
            pattern: {
              ...pattern,
              steps: pattern.steps.map((x, i) => ({ ...x, filter: tagged(x.filter, `${field}.pattern.steps[${i}].filter`) })),
              ...(pattern.negations === undefined ? {} : { negations: pattern.negations.map((x, i) => ({ ...x, filter: tagged(x.filter, `${field}.pattern.negations[${i}].filter`) })) }),
              ...(pattern.aggregates === undefined ? {} : { aggregates: pattern.aggregates.map((x, i) => ({ ...x, filter: tagged(x.filter, `${field}.pattern.aggregates[${i}].filter`) })) }),
            },
          }),
    };
  }
}
