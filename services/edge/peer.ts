/**
 * Who a client certificate says the caller is (mutual TLS, `AMBIT_TLS_CLIENT_CA`): the subject's
 * common name of a certificate that verified against the client CA, and when it expires. A socket
 * whose certificate did not verify (optional mode), or that is not TLS, has none.
 */
import type { TLSSocket } from 'node:tls';

export interface PeerIdentity {
  /** The certificate subject's CN. */
  subject: string;
  /** The certificate's notAfter, whole seconds since the epoch. */
  expiresAt: number;
}

interface PeerCertificate {
  subject?: Record<string, string | string[] | undefined>;
  valid_to?: string;
}

function identityOf(cert: PeerCertificate | undefined | null): PeerIdentity | null {
  if (cert === undefined || cert === null) return null;
  const cn = cert.subject?.CN;
  const subject = Array.isArray(cn) ? cn[0] : cn;
  const until = Date.parse(cert.valid_to ?? '');
  if (typeof subject !== 'string' || subject === '' || !Number.isFinite(until)) return null;
  return { subject, expiresAt: Math.floor(until / 1000) };
}

/** The verified client certificate of a TLS socket, if any. */
export function peerOfSocket(socket: unknown): PeerIdentity | null {
  const s = socket as Partial<TLSSocket> | null | undefined;
  if (s === null || s === undefined || typeof s.getPeerCertificate !== 'function' || s.authorized !== true) return null;
  return identityOf(s.getPeerCertificate() as PeerCertificate);
}

/** The verified client certificate of a grpc-js call (its auth context has one only when it verified). */
export function peerOfCall(call: { getAuthContext?: () => { sslPeerCertificate?: unknown } | null }): PeerIdentity | null {
  const ctx = call.getAuthContext?.();
  return identityOf((ctx?.sslPeerCertificate ?? null) as PeerCertificate | null);
}
