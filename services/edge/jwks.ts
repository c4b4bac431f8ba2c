/**
 * Public keys of an identity provider as a JWK Set (RFC 7517), for tokens the gateway did not mint
 * (auth.ts): read from a file or fetched from a URL, kept by key id, refreshed every `refreshS`
 * seconds and, at most once per `minRefreshS`, when a token names a key id not held (a provider
 * that rotates publishes the new key before it signs with it). A refresh that fails keeps the keys
 * held and says why in `stats()`. Keys are node:crypto KeyObjects, so a token is verified without
 * a promise on the call's path.
 */
import { type KeyObject, createPublicKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';

/** Signature algorithms a key may serve, by key type (RFC 7518 §3, RFC 8037). */
export const ASYMMETRIC_ALGS: Readonly<Record<string, { kty: 'RSA' | 'EC' | 'OKP'; hash: string | null; pss?: true; crv?: readonly string[] }>> = Object.freeze({
  RS256: { kty: 'RSA', hash: 'sha256' },
  RS384: { kty: 'RSA', hash: 'sha384' },
  RS512: { kty: 'RSA', hash: 'sha512' },
  PS256: { kty: 'RSA', hash: 'sha256', pss: true },
  PS384: { kty: 'RSA', hash: 'sha384', pss: true },
  PS512: { kty: 'RSA', hash: 'sha512', pss: true },
  ES256: { kty: 'EC', hash: 'sha256', crv: ['P-256'] },
  ES384: { kty: 'EC', hash: 'sha384', crv: ['P-384'] },
  ES512: { kty: 'EC', hash: 'sha512', crv: ['P-521'] },
  EdDSA: { kty: 'OKP', hash: null, crv: ['Ed25519', 'Ed448'] },
});

/** A key set document larger than this is refused (a provider's holds a few keys). */
const MAX_JWKS_BYTES = 1 << 20;

/** RSA keys shorter than this are refused (RFC 7518 §3.3). */
const MIN_RSA_BITS = 2048;

export interface VerifyKey {
  /** '' when the JWK has no kid. */
  kid: string;
  /** The JWK's alg, or null when it does not pin one. */
  alg: string | null;
  kty: string;
  crv: string | null;
  key: KeyObject;
}

/** The usable public signature keys of a JWK Set document, and why the others were skipped. */
export function parseJwks(text: string): { keys: VerifyKey[]; skipped: string[] } {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new Error(`jwks: not JSON: ${(err as Error).message}`);
  }
  const list = typeof doc === 'object' && doc !== null ? (doc as { keys?: unknown }).keys : undefined;
  if (!Array.isArray(list)) throw new Error('jwks: expected an object with a "keys" array');
  const keys: VerifyKey[] = [];
  const skipped: string[] = [];
  list.forEach((jwk: unknown, i) => {
    const name = `keys[${i}]`;
    if (typeof jwk !== 'object' || jwk === null) return void skipped.push(`${name}: not an object`);
    const j = jwk as Record<string, unknown>;
    const kid = typeof j.kid === 'string' ? j.kid : '';
    const label = kid === '' ? name : `${name} (kid ${JSON.stringify(kid)})`;
    if (j.use !== undefined && j.use !== 'sig') return void skipped.push(`${label}: use is ${JSON.stringify(j.use)}, not "sig"`);
    if (Array.isArray(j.key_ops) && !j.key_ops.includes('verify')) return void skipped.push(`${label}: key_ops lacks "verify"`);
    if (j.d !== undefined || j.k !== undefined) return void skipped.push(`${label}: a private or symmetric key, not a public one`);
    if (j.kty !== 'RSA' && j.kty !== 'EC' && j.kty !== 'OKP') return void skipped.push(`${label}: kty ${JSON.stringify(j.kty)} is not RSA, EC or OKP`);
    const alg = typeof j.alg === 'string' ? j.alg : null;
    if (alg !== null && ASYMMETRIC_ALGS[alg]?.kty !== j.kty) return void skipped.push(`${label}: alg ${JSON.stringify(alg)} does not go with kty ${j.kty}`);
    let key: KeyObject;
    try {
      key = createPublicKey({ key: j as unknown as import('node:crypto').JsonWebKey, format: 'jwk' });
    } catch (err) {
      return void skipped.push(`${label}: ${(err as Error).message}`);
    }
    if (j.kty === 'RSA' && (key.asymmetricKeyDetails?.modulusLength ?? 0) < MIN_RSA_BITS) return void skipped.push(`${label}: RSA key of ${key.asymmetricKeyDetails?.modulusLength} bits, fewer than ${MIN_RSA_BITS}`);
    keys.push({ kid, alg, kty: j.kty, crv: typeof j.crv === 'string' ? j.crv : null, key });
  });
  return { keys, skipped };
}

export interface KeySetOptions {
  /** Seconds between refreshes (0: never). */
  refreshS: number;
  /** Least seconds between refreshes asked for by an unknown key id. */
  minRefreshS: number;
  /** A fetch's time limit, ms. */
  fetchTimeoutMs: number;
  /**
   * `open` only: the first retry after a failed first load, ms; each next one waits twice as long,
   * up to `retryMaxMs` (default 1000 and 60,000).
   */
  retryMinMs: number;
  retryMaxMs: number;
}

export interface KeySetStats {
  keys: number;
  refreshes: number;
  failures: number;
  /** Why the last refresh failed ('' when it did not), and what the last document skipped. */
  lastError: string;
  skipped: string[];
  /** Whether a refresh is under way now. */
  refreshing: boolean;
}

const KEY_SET_DEFAULTS: KeySetOptions = { refreshS: 300, minRefreshS: 30, fetchTimeoutMs: 5000, retryMinMs: 1000, retryMaxMs: 60_000 };

export class KeySet {
  private byKid = new Map<string, VerifyKey>();
  private all: VerifyKey[] = [];
  private onlyFor = new Map<string, VerifyKey>();
  private timer: ReturnType<typeof setInterval> | null = null;
  private lastAsked = -Infinity;
  private inFlight: Promise<void> | null = null;
  private readonly counts: Omit<KeySetStats, 'refreshing'> = { keys: 0, refreshes: 0, failures: 0, lastError: '', skipped: [] };
  private retry: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private markReady!: () => void;
  private readonly whenReady = new Promise<void>((resolve) => (this.markReady = resolve));

  private constructor(
    /** A file path or an http(s) URL. */
    readonly source: string,
    private readonly o: KeySetOptions,
    private readonly now: () => number,
  ) {}

  /** Loads the set (which must hold a usable key) and starts its refreshes; rejects when it cannot. */
  static async load(source: string, options: Partial<KeySetOptions> = {}, now: () => number = () => Date.now() / 1000): Promise<KeySet> {
    const s = new KeySet(source, { ...KEY_SET_DEFAULTS, ...options }, now);
    s.install(await s.read());
    if (s.all.length === 0) throw new Error(`jwks: ${source} holds no usable key (${s.counts.skipped.join('; ') || 'none listed'})`);
    s.loaded();
    return s;
  }

  /**
   * Like `load`, but a set that cannot be read yet (the provider down, a file not mounted yet)
   * does not fail: the set starts empty (`ready()` pending, `lastError` saying why) and is read
   * again after `retryMinMs`, then twice as long each time up to `retryMaxMs`, until it holds a
   * usable key; then it refreshes every `refreshS` as a loaded one. A gateway starts either way:
   * its own tokens work at once, and the provider's get UNAVAILABLE until the keys are in.
   */
  static async open(source: string, options: Partial<KeySetOptions> = {}, now: () => number = () => Date.now() / 1000): Promise<KeySet> {
    const s = new KeySet(source, { ...KEY_SET_DEFAULTS, ...options }, now);
    await s.attempt(s.o.retryMinMs);
    return s;
  }

  /** Resolves once the set holds a usable key. */
  ready(): Promise<void> {
    return this.whenReady;
  }

  /** Whether the set has held a usable key (it keeps them through failed refreshes). */
  get usable(): boolean {
    return this.all.length > 0;
  }

  private async attempt(waitMs: number): Promise<void> {
    try {
      const r = await this.read();
      if (r.keys.length === 0) throw new Error(`jwks: ${this.source} holds no usable key (${r.skipped.join('; ') || 'none listed'})`);
      if (this.closed) return;
      this.install(r);
      this.loaded();
    } catch (err) {
      this.counts.failures++;
      this.counts.lastError = (err as Error).message;
      if (this.closed) return;
      this.retry = setTimeout(() => {
        this.retry = null;
        void this.attempt(Math.min(waitMs * 2, this.o.retryMaxMs));
      }, waitMs); // not unref'd: `ready()` is worth waiting for (close() stops it)
    }
  }

  /** The set holds a usable key: refreshes start, `ready()` resolves. */
  private loaded(): void {
    this.counts.lastError = '';
    this.markReady();
    if (this.o.refreshS > 0 && this.timer === null) {
      this.timer = setInterval(() => void this.refresh(), this.o.refreshS * 1000);
      this.timer.unref();
    }
  }

  private async read(): Promise<{ keys: VerifyKey[]; skipped: string[] }> {
    if (/^https?:\/\//i.test(this.source)) {
      const res = await fetch(this.source, { signal: AbortSignal.timeout(this.o.fetchTimeoutMs), headers: { accept: 'application/jwk-set+json, application/json' } });
      if (!res.ok) throw new Error(`jwks: GET ${this.source}: HTTP ${res.status}`);
      const body = await res.arrayBuffer();
      if (body.byteLength > MAX_JWKS_BYTES) throw new Error(`jwks: GET ${this.source}: ${body.byteLength} bytes, more than ${MAX_JWKS_BYTES}`);
      return parseJwks(Buffer.from(body).toString('utf8'));
    }
    return parseJwks(await readFile(this.source, 'utf8'));
  }

  private install(r: { keys: VerifyKey[]; skipped: string[] }): void {
    const byKid = new Map<string, VerifyKey>();
    for (const k of r.keys) if (k.kid !== '') byKid.set(k.kid, k);
    // For tokens without a kid: the one key that can serve each algorithm (none when several can).
    const onlyFor = new Map<string, VerifyKey>();
    for (const [alg, spec] of Object.entries(ASYMMETRIC_ALGS)) {
      const fits = r.keys.filter((k) => k.kty === spec.kty && (k.alg === null || k.alg === alg));
      if (fits.length === 1) onlyFor.set(alg, fits[0]);
    }
    this.byKid = byKid;
    this.onlyFor = onlyFor;
    this.all = r.keys;
    this.counts.keys = r.keys.length;
    this.counts.skipped = r.skipped;
  }

  /** Reads the set again; a failure (or a set with no usable key) keeps the keys held. */
  refresh(): Promise<void> {
    this.inFlight ??= (async () => {
      try {
        const r = await this.read();
        if (r.keys.length === 0) throw new Error(`jwks: ${this.source} holds no usable key now (${r.skipped.join('; ') || 'none listed'})`);
        if (this.closed) return;
        this.install(r);
        this.counts.refreshes++;
        this.loaded();
      } catch (err) {
        this.counts.failures++;
        this.counts.lastError = (err as Error).message;
      } finally {
        this.inFlight = null;
      }
    })();
    return this.inFlight;
  }

  /**
   * The key a token's header names: by kid, or the only key that can serve `alg` when the token
   * names none. An unknown kid asks for a refresh (at most once per minRefreshS).
   */
  find(kid: string | null, alg: string): VerifyKey | null {
    if (kid !== null) {
      const k = this.byKid.get(kid);
      if (k === undefined && this.now() - this.lastAsked >= this.o.minRefreshS) {
        this.lastAsked = this.now();
        void this.refresh();
      }
      return k ?? null;
    }
    return this.onlyFor.get(alg) ?? null;
  }

  stats(): KeySetStats {
    return { ...this.counts, skipped: [...this.counts.skipped], refreshing: this.inFlight !== null };
  }

  close(): void {
    this.closed = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    if (this.retry !== null) clearTimeout(this.retry);
    this.retry = null;
  }
}
