/**
 * Device and publisher tokens: compact JWTs (RFC 7519) signed with HMAC-SHA256 under a shared
 * secret, carrying the subject (device id or publisher name), scopes and an expiry. JWT keeps the
 * format familiar and inspectable; HS256 and a handful of claims are all Ambit needs, so this is
 * written against node:crypto rather than pulling in a JOSE library.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Revocation } from '../hub/port.js';

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
  /** Seconds since the epoch. */
  expiresAt: number;
  /** When it was issued (seconds since the epoch; 0 when the token does not say). */
  issuedAt: number;
  /** The token's id (`jti`; '' for tokens minted before ids). */
  tokenId: string;
}

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
    readonly code: 'UNAUTHENTICATED' | 'PERMISSION_DENIED',
    message: string,
  ) {
    super(message);
    this.name = 'AuthError';
  }
}

export interface IssueOptions {
  subject: string;
  scopes: readonly string[];
  /** Lifetime in seconds (default one day). */
  ttlSeconds?: number;
}

const HEADER = b64url(Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'JWT' })));
const MAX_TOKEN_CHARS = 4096;

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

export class TokenAuthority {
  private readonly key: Buffer;
  /** Revoked tokens verify() refuses (UNAUTHENTICATED); null: none are. */
  revoked: RevokedTokens | null = null;

  /** `secret`: at least 32 bytes (RFC 7518 §3.2 asks for a key as long as the hash). */
  constructor(secret: string | Buffer, private readonly now: () => number = () => Date.now() / 1000) {
    this.key = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret);
    if (this.key.length < 32) throw new Error(`auth: token secret must be at least 32 bytes, got ${this.key.length}`);
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
    const payload = b64url(Buffer.from(JSON.stringify({ sub: o.subject, scope: o.scopes.join(' '), iat, exp: iat + Math.ceil(ttl), jti: tokenId() })));
    return `${HEADER}.${payload}.${this.sign(`${HEADER}.${payload}`)}`;
  }

  /**
   * The principal a token names; AuthError(UNAUTHENTICATED) when it is malformed, forged, expired
   * or (unless `checkRevoked` is false) revoked.
   */
  verify(token: string, checkRevoked = true): Principal {
    if (typeof token !== 'string' || token.length > MAX_TOKEN_CHARS) throw new AuthError('UNAUTHENTICATED', 'token is malformed');
    const parts = token.split('.');
    if (parts.length !== 3) throw new AuthError('UNAUTHENTICATED', 'token is malformed (expected header.payload.signature)');
    const [h, p, sig] = parts;
    const want = Buffer.from(this.sign(`${h}.${p}`));
    const got = Buffer.from(sig);
    if (got.length !== want.length || !timingSafeEqual(got, want)) throw new AuthError('UNAUTHENTICATED', 'token signature is invalid');
    let header: unknown;
    let claims: unknown;
    try {
      header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8'));
      claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'));
    } catch {
      throw new AuthError('UNAUTHENTICATED', 'token is malformed (not JSON)');
    }
    if (!isRecord(header) || header.alg !== 'HS256') throw new AuthError('UNAUTHENTICATED', 'token algorithm must be HS256');
    if (!isRecord(claims) || typeof claims.sub !== 'string' || claims.sub === '' || typeof claims.exp !== 'number' || typeof claims.scope !== 'string') {
      throw new AuthError('UNAUTHENTICATED', 'token claims are malformed (need sub, scope, exp)');
    }
    const now = this.now();
    if (claims.exp <= now) throw new AuthError('UNAUTHENTICATED', 'token has expired');
    const principal: Principal = {
      subject: claims.sub,
      scopes: scopeSet(claims.scope),
      expiresAt: claims.exp,
      issuedAt: typeof claims.iat === 'number' ? claims.iat : 0,
      tokenId: typeof claims.jti === 'string' ? claims.jti : '',
    };
    if (checkRevoked && this.revoked !== null && this.revoked.revoked(principal, now)) throw new AuthError('UNAUTHENTICATED', 'token was revoked');
    return principal;
  }

  private sign(data: string): string {
    return b64url(createHmac('sha256', this.key).update(data).digest());
  }
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
