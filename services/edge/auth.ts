/**
 * Device and publisher tokens: compact JWTs (RFC 7519) carrying the subject (device id or
 * publisher name), scopes and an expiry. The gateway mints and takes its own, HMAC-SHA256 under a
 * shared secret; with a key set (jwks.ts) it also takes an identity provider's, signed RS*, PS*,
 * ES* or EdDSA, with `aud`, `iss`, `nbf` and `exp` checked (a clock skew allowed) and the subject
 * and scopes read from configurable claims. Written against node:crypto rather than a JOSE
 * library: every call and stream verifies its token on the call's path, and node:crypto verifies
 * synchronously, where the JOSE libraries' verification returns a promise; the algorithm rules
 * that matter (a key serves only its own type's algorithms, no "none", no HMAC with a public key)
 * are explicit below and tested.
 */
import { constants, createHmac, randomBytes, timingSafeEqual, verify as cryptoVerify } from 'node:crypto';
import type { Revocation } from '../hub/port.js';
import { ASYMMETRIC_ALGS, type KeySet } from './jwks.js';

/** What a token may do. */
export const SCOPES = Object.freeze({
  /** Update its own position, manage its own subscriptions, receive its notifications. */
  device: 'device',
  /** Update any device's position (fleet back ends using UpdateLocations). */
  locationAny: 'location:any',
  publish: 'publish',
  ops: 'ops',
});

export type Scope = (typeof SCOPES)[keyof typeof SCOPES];

export const KNOWN_SCOPES: ReadonlySet<string> = new Set<string>(Object.values(SCOPES));

export interface Principal {
  subject: string;
  scopes: ReadonlySet<string>;
  /** When the token stops being taken: seconds since the epoch, whole (a provider token's exp plus the allowed skew). */
  expiresAt: number;
  /** When it was issued (seconds since the epoch; 0 when the token does not say). */
  issuedAt: number;
  /** The token's id (`jti`; '' for tokens minted before ids). */
  tokenId: string;
  /**
   * With tenants on (the policy's `tenantClaim`): the token's tenant ('' for none, the default
   * tenant); `subject` is then `<tenant>/<sub>`, so devices, publishers and revocations of one
   * tenant never meet another's. '' with tenants off.
   */
  tenant?: string;
}

/** A tenant's name: what follows `tenant:` in its reserved tag and precedes `/` in its ids. */
export const TENANT_NAME = /^[a-z0-9][a-z0-9._-]{0,47}$/;

/**
 * The revocations in force, for the check every token goes through: a token by its id, or every
 * token of a subject issued up to a time. Replaced whole when the hub says they changed.
 */
export class RevokedTokens {
  private ids = new Map<string, number>();
  private subjects = new Map<string, { upTo: number; until: number }>();

  get size(): number {
    return this.ids.size + this.subjects.size;
  }

  /** One revocation, before the hub's next list (which holds it) replaces them all. */
  add(r: Revocation): void {
    if ('tokenId' in r) this.ids.set(r.tokenId, Math.max(r.untilS, this.ids.get(r.tokenId) ?? 0));
    else {
      const had = this.subjects.get(r.subject);
      this.subjects.set(r.subject, { upTo: Math.max(r.issuedUpToS, had?.upTo ?? 0), until: Math.max(r.untilS, had?.until ?? 0) });
    }
  }

  set(all: readonly Revocation[]): void {
    const ids = new Map<string, number>();
    const subjects = new Map<string, { upTo: number; until: number }>();
    for (const r of all) {
      if ('tokenId' in r) ids.set(r.tokenId, r.untilS);
      else subjects.set(r.subject, { upTo: r.issuedUpToS, until: r.untilS });
    }
    this.ids = ids;
    this.subjects = subjects;
  }

  /** Whether the token of `p` is revoked at `nowS`. */
  revoked(p: Principal, nowS: number): boolean {
    if (this.ids.size === 0 && this.subjects.size === 0) return false;
    if (p.tokenId !== '') {
      const until = this.ids.get(p.tokenId);
      if (until !== undefined && until > nowS) return true;
    }
    const s = this.subjects.get(p.subject);
    return s !== undefined && s.until > nowS && p.issuedAt <= s.upTo;
  }
}

/** Scope sets by scope claim: a node's tokens carry a few distinct ones, and each open stream keeps its principal. */
const scopeSets = new Map<string, ReadonlySet<string>>();
const MAX_SCOPE_SETS = 256;

function scopeSet(claim: string): ReadonlySet<string> {
  let set = scopeSets.get(claim);
  if (set === undefined) {
    set = new Set(claim.split(' ').filter((s) => s !== ''));
    if (scopeSets.size < MAX_SCOPE_SETS) scopeSets.set(claim, set);
  }
  return set;
}

export class AuthError extends Error {
  constructor(
    /** UNAVAILABLE: the token cannot be checked now (the identity provider's keys are not in yet): retry. */
    readonly code: 'UNAUTHENTICATED' | 'PERMISSION_DENIED' | 'UNAVAILABLE',
    message: string,
  ) {
    super(message);
    this.name = 'AuthError';
  }
}

export interface IssueOptions {
  subject: string;
  scopes: readonly string[];
  /** The tenant claim (`tenant`) of the gateway's own tokens, for deployments with tenants. */
  tenant?: string;
  /** Lifetime in seconds (default one day). */
  ttlSeconds?: number;
}

const HEADER = b64url(Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'JWT' })));
/** Longest token taken: room for a provider's access tokens with group claims and RSA-4096 signatures. */
const MAX_TOKEN_CHARS = 12_288;

/**
 * A new token id: 16 base64url characters, never beginning with '-', so that it can be given to a
 * command line as it is (`ambit revoke token-id ID`) without being read as an option.
 */
function tokenId(): string {
  for (;;) {
    const id = randomBytes(12).toString('base64url');
    if (id[0] !== '-') return id;
  }
}

/** Which tokens a gateway takes besides its own (HS256 under its secret). */
export interface TokenPolicy {
  /** An identity provider's public keys: tokens signed with them (RS*, PS*, ES*, EdDSA) are taken too. */
  keys: KeySet | null;
  /** When not empty, a token's `aud` (a string or an array) must name one of these. */
  audience: readonly string[];
  /** When not empty, a token's `iss` must be one of these. */
  issuer: readonly string[];
  /** Seconds of clock difference allowed on `exp` and `nbf`. */
  clockSkewS: number;
  /** The claim holding the subject (device id or publisher name). */
  subjectClaim: string;
  /** The claim holding the scopes: a space-separated string or an array of strings. */
  scopeClaim: string;
  /**
   * Tenants (AMBIT_TENANT_CLAIM): the claim of a provider's tokens naming the tenant (the
   * gateway's own tokens use `tenant`); null: tenants off, no claim read.
   */
  tenantClaim: string | null;
}

export const DEFAULT_TOKEN_POLICY: Readonly<TokenPolicy> = Object.freeze({ keys: null, audience: [], issuer: [], clockSkewS: 0, subjectClaim: 'sub', scopeClaim: 'scope', tenantClaim: null });

/** The claims of the gateway's own tokens (no audience or issuer: the secret vouches for them). */
const OWN_TOKENS: Readonly<TokenPolicy> = Object.freeze({ ...DEFAULT_TOKEN_POLICY, tenantClaim: 'tenant' });

export class TokenAuthority {
  private readonly key: Buffer;
  private readonly policy: TokenPolicy;
  /** Revoked tokens verify() refuses (UNAUTHENTICATED); null: none are. */
  revoked: RevokedTokens | null = null;

  /** `secret`: at least 32 bytes (RFC 7518 §3.2 asks for a key as long as the hash). */
  constructor(secret: string | Buffer, private readonly now: () => number = () => Date.now() / 1000, policy: Partial<TokenPolicy> = {}) {
    this.key = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret);
    if (this.key.length < 32) throw new Error(`auth: token secret must be at least 32 bytes, got ${this.key.length}`);
    this.policy = { ...DEFAULT_TOKEN_POLICY, ...policy };
    if (!(Number.isFinite(this.policy.clockSkewS) && this.policy.clockSkewS >= 0)) throw new Error(`auth: clockSkewS must be a finite number >= 0, got ${this.policy.clockSkewS}`);
    if (this.policy.subjectClaim === '' || this.policy.scopeClaim === '') throw new Error('auth: subjectClaim and scopeClaim must not be empty');
  }

  /** The secret, for dev mode's printout only (a made-up secret the demo needs to mint device tokens). */
  secretForDev(): string {
    return this.key.toString('utf8');
  }

  issue(o: IssueOptions): string {
    if (typeof o.subject !== 'string' || o.subject.length === 0 || Buffer.byteLength(o.subject) > 128) {
      throw new Error('auth: subject must be 1 to 128 UTF-8 bytes');
    }
    for (const s of o.scopes) if (!KNOWN_SCOPES.has(s)) throw new Error(`auth: unknown scope ${JSON.stringify(s)}, expected one of ${[...KNOWN_SCOPES].join(', ')}`);
    const ttl = o.ttlSeconds ?? 86_400;
    if (!Number.isFinite(ttl) || ttl <= 0) throw new Error(`auth: ttlSeconds must be > 0, got ${ttl}`);
    const iat = Math.floor(this.now());
    if (o.tenant !== undefined && !TENANT_NAME.test(o.tenant)) throw new Error(`auth: tenant must match ${TENANT_NAME}, got ${JSON.stringify(o.tenant)}`);
    const payload = b64url(Buffer.from(JSON.stringify({ sub: o.subject, scope: o.scopes.join(' '), iat, exp: iat + Math.ceil(ttl), jti: tokenId(), ...(o.tenant === undefined ? {} : { tenant: o.tenant }) })));
    return `${HEADER}.${payload}.${this.sign(`${HEADER}.${payload}`)}`;
  }

  /**
   * The principal a token names; AuthError(UNAUTHENTICATED) when it is malformed, forged, expired,
   * not yet valid, for another audience or issuer, or (unless `checkRevoked` is false) revoked.
   * Tokens are HS256 under the secret (the gateway's own), or signed with a key of the policy's
   * key set; the algorithm decides which, and a key serves only the algorithms of its type.
   */
  verify(token: string, checkRevoked = true): Principal {
    if (typeof token !== 'string' || token.length > MAX_TOKEN_CHARS) throw new AuthError('UNAUTHENTICATED', `token is malformed (more than ${MAX_TOKEN_CHARS} characters)`);
    const parts = token.split('.');
    if (parts.length !== 3) throw new AuthError('UNAUTHENTICATED', 'token is malformed (expected header.payload.signature)');
    const [h, p, sig] = parts;
    let header: unknown;
    let claims: unknown;
    try {
      header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8'));
      claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'));
    } catch {
      throw new AuthError('UNAUTHENTICATED', 'token is malformed (not JSON)');
    }
    if (!isRecord(header)) throw new AuthError('UNAUTHENTICATED', 'token header is malformed');
    // Critical extensions must be understood (RFC 7515 §4.1.11): none are.
    if (header.crit !== undefined) throw new AuthError('UNAUTHENTICATED', 'token header names critical extensions (crit), which this gateway does not understand');
    // HS256: the gateway's own tokens (however their header is written), checked by the secret
    // alone, so no public key can reach this path. Anything else: a key of the key set.
    const own = header.alg === 'HS256';
    if (own) {
      const want = Buffer.from(this.sign(`${h}.${p}`));
      const got = Buffer.from(sig);
      if (got.length !== want.length || !timingSafeEqual(got, want)) throw new AuthError('UNAUTHENTICATED', 'token signature is invalid');
    } else if (this.policy.keys === null) {
      throw new AuthError('UNAUTHENTICATED', 'token algorithm must be HS256');
    } else {
      this.verifySigned(header, `${h}.${p}`, sig);
    }
    if (!isRecord(claims)) throw new AuthError('UNAUTHENTICATED', 'token claims are malformed');
    // The gateway's own tokens carry sub and scope; the provider's, the configured claims, and
    // only theirs are held to the audience and issuer.
    const pol = own ? OWN_TOKENS : this.policy;
    const subject = claims[pol.subjectClaim];
    const scope = claims[pol.scopeClaim];
    if (typeof subject !== 'string' || subject === '' || Buffer.byteLength(subject) > 128) throw new AuthError('UNAUTHENTICATED', `token claims are malformed (${pol.subjectClaim} must be 1 to 128 UTF-8 bytes)`);
    const exp = claims.exp;
    if (!isTime(exp) || !(typeof scope === 'string' || (Array.isArray(scope) && scope.every((x) => typeof x === 'string')))) {
      throw new AuthError('UNAUTHENTICATED', `token claims are malformed (need ${pol.subjectClaim}, ${pol.scopeClaim}, exp a time in seconds)`);
    }
    const now = this.now();
    // The skew is the provider's clocks' slack; the gateway's own tokens are timed by its own clock.
    const skew = own ? 0 : this.policy.clockSkewS;
    // Effective expiry, a whole second: what the streams' expiry clock and revocations keep to.
    const expiresAt = Math.floor(exp + skew);
    if (expiresAt <= now) throw new AuthError('UNAUTHENTICATED', 'token has expired');
    if (claims.nbf !== undefined && (!isTime(claims.nbf) || claims.nbf - skew > now)) throw new AuthError('UNAUTHENTICATED', 'token is not valid yet (nbf)');
    if (pol.audience.length > 0) {
      const aud = claims.aud;
      const auds = typeof aud === 'string' ? [aud] : Array.isArray(aud) ? aud : [];
      if (!auds.some((a) => typeof a === 'string' && pol.audience.includes(a))) throw new AuthError('UNAUTHENTICATED', `token audience must be one of ${pol.audience.join(', ')}`);
    }
    if (pol.issuer.length > 0 && !(typeof claims.iss === 'string' && pol.issuer.includes(claims.iss))) throw new AuthError('UNAUTHENTICATED', `token issuer must be one of ${pol.issuer.join(', ')}`);
    // Tenants: the tenant claim qualifies the subject; a malformed one is a malformed token.
    let tenant = '';
    if (this.policy.tenantClaim !== null) {
      const t = claims[own ? 'tenant' : this.policy.tenantClaim];
      if (t !== undefined && t !== null && t !== '') {
        if (typeof t !== 'string' || !TENANT_NAME.test(t)) throw new AuthError('UNAUTHENTICATED', `token claims are malformed (${own ? 'tenant' : this.policy.tenantClaim} must be a tenant name: lower-case letters, digits, '.', '_' and '-', 1 to 48 characters)`);
        tenant = t;
      } else if (subject.includes('/')) {
        // The default tenant's subjects must never be taken for a tenant's (<tenant>/<sub>).
        throw new AuthError('UNAUTHENTICATED', `token claims are malformed (${pol.subjectClaim} must not contain '/' without a tenant in a deployment with tenants)`);
      }
    }
    const principal: Principal = {
      subject: tenant === '' ? subject : `${tenant}/${subject}`,
      tenant,
      scopes: typeof scope === 'string' ? scopeSet(scope) : new Set(scope as string[]),
      expiresAt,
      issuedAt: isTime(claims.iat) ? Math.floor(claims.iat) : 0,
      tokenId: typeof claims.jti === 'string' ? claims.jti : '',
    };
    if (checkRevoked && this.revoked !== null && this.revoked.revoked(principal, now)) throw new AuthError('UNAUTHENTICATED', 'token was revoked');
    return principal;
  }

  /** A token signed with a key of the key set: the header's algorithm, its key, the signature. */
  private verifySigned(header: Record<string, unknown>, data: string, sig: string): void {
    const alg = header.alg;
    const spec = typeof alg === 'string' && alg !== 'HS256' && Object.hasOwn(ASYMMETRIC_ALGS, alg) ? ASYMMETRIC_ALGS[alg] : undefined;
    if (spec === undefined) throw new AuthError('UNAUTHENTICATED', `token algorithm must be HS256 or one of ${Object.keys(ASYMMETRIC_ALGS).join(', ')}, got ${JSON.stringify(alg)}`);
    const kid = typeof header.kid === 'string' ? header.kid : null;
    const keys = this.policy.keys!;
    if (!keys.usable) throw new AuthError('UNAVAILABLE', `the identity provider's keys are not loaded yet, try again (${keys.stats().lastError || 'loading'})`);
    const key = keys.find(kid, alg as string);
    if (key === null) throw new AuthError('UNAUTHENTICATED', kid === null ? `token names no key id and no single key serves ${alg}` : `token key id ${JSON.stringify(kid)} is not among the identity provider's keys`);
    if (key.kty !== spec.kty || (key.alg !== null && key.alg !== alg) || (spec.crv !== undefined && !spec.crv.includes(key.crv ?? ''))) {
      throw new AuthError('UNAUTHENTICATED', `token algorithm ${alg} does not go with its key (${key.kty}${key.crv === null ? '' : ` ${key.crv}`}${key.alg === null ? '' : `, ${key.alg}`})`);
    }
    const ok = cryptoVerify(spec.hash, Buffer.from(data), { key: key.key, dsaEncoding: 'ieee-p1363', ...(spec.pss === true ? { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST } : {}) }, Buffer.from(sig, 'base64url'));
    if (!ok) throw new AuthError('UNAUTHENTICATED', 'token signature is invalid');
  }

  private sign(data: string): string {
    return b64url(createHmac('sha256', this.key).update(data).digest());
  }
}

/** A time claim: seconds since the epoch, finite and within what a Date can hold. */
function isTime(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= 8.64e12;
}

/** PERMISSION_DENIED unless the principal holds `scope`. */
export function requireScope(p: Principal, scope: Scope): void {
  if (!p.scopes.has(scope)) throw new AuthError('PERMISSION_DENIED', `token lacks the ${scope} scope`);
}

/** The bearer token of an `authorization` metadata value. */
export function bearer(value: unknown): string {
  if (typeof value !== 'string' || value === '') throw new AuthError('UNAUTHENTICATED', 'missing authorization metadata (expected "Bearer <token>")');
  const m = /^Bearer +(\S+)$/i.exec(value);
  if (m === null) throw new AuthError('UNAUTHENTICATED', 'authorization metadata must be "Bearer <token>"');
  return m[1];
}

function b64url(b: Buffer): string {
  return b.toString('base64url');
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
