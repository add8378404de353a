// TLS for every API: the server asks every client for a certificate but lets
// the handshake finish without one (or with one not under the cluster CA), so
// that the two handshake calls (AAA.Escrow and Curator.RegisterNode/
// CommitNode/JoinNode) can authenticate callers by a self-signed certificate.
// Every other call is refused unless the certificate chains to the cluster CA
// (authenticate() in peer.ts: once per connection, its validity per call;
// see callerOf in service.ts).

import { ChannelCredentials, ServerCredentials, type ChannelOptions } from "@grpc/grpc-js";
import { Socket } from "node:net";
import { TLSSocket, type PeerCertificate, type SecureContextOptions } from "node:tls";
import { X509Certificate } from "node:crypto";
import type { KeyObject } from "node:crypto";

/**
 * The TLS server name (SNI) sent when the caller does not know which node it
 * dials. bun refuses IP addresses as TLS server names, and nodes are dialled
 * by IP, so some DNS name must be sent; it is never what identity is checked
 * against. Server identity is checked by ClientTlsOptions.server.verify on
 * the certificate itself.
 */
export const UNNAMED_SERVER_SNI = "unnamed.nodecore.invalid";

/** How long a client gets to complete the TLS handshake before the server drops it (listener.ts judges it). */
export const TLS_HANDSHAKE_TIMEOUT_MS = 10_000;
/**
 * The runtime's own handshake timer: only a backstop. It cannot tell a
 * client that is late from a process that was away (deadline.ts), and bun's
 * (1.4.5) says "TLS handshake timeout" but leaves open a connection that
 * sent its whole ClientHello and then stalled; so the listener's deadline,
 * which does neither, is the one that bounds handshakes, and this one lies
 * beyond the longest wait that deadline gives.
 */
export const HANDSHAKE_BACKSTOP_MS = 180_000;

/**
 * Server credentials that request, but do not require, a client certificate
 * (chain checks happen per call: some calls accept self-signed
 * certificates), and can be given a new certificate without a restart (curator certificates
 * are short-lived).
 */
export class RotatingServerCredentials extends ServerCredentials {
  constructor(contextOptions: SecureContextOptions, allowHttp1 = false) {
    // allowHTTP1: the server also speaks HTTP/1.1 to clients that offer no
    // h2 (a metrics scraper); listen() routes those requests (listener.ts).
    super({ requestCert: true, rejectUnauthorized: false, handshakeTimeout: HANDSHAKE_BACKSTOP_MS, ...(allowHttp1 ? { allowHTTP1: true } : {}) } as SecureContextOptions, contextOptions);
  }
  _equals(other: ServerCredentials): boolean {
    return other === this;
  }
  /** Serves `certificate` on every new connection from now on. */
  rotate(options: ServerTlsOptions): void {
    this.updateSecureContextOptions(contextOptionsOf(options));
  }
}

export interface ServerTlsOptions {
  /** This server's certificate and key. */
  certificate: X509Certificate;
  privateKey: KeyObject;
}

function contextOptionsOf(options: ServerTlsOptions): SecureContextOptions {
  return { cert: options.certificate.toString(), key: options.privateKey.export({ format: "pem", type: "pkcs8" }).toString() };
}

export function serverCredentials(options: ServerTlsOptions & { allowHttp1?: boolean }): RotatingServerCredentials {
  return new RotatingServerCredentials(contextOptionsOf(options), options.allowHttp1);
}

/**
 * Who the server must be. `ca` is the CA its certificate must chain to;
 * `verify` says what else the certificate must prove (which node, which
 * role, which address) and returns the problem, or undefined if it proves it.
 * "unverified" exists for one call only: the owner's first contact with a
 * cluster whose CA it does not know yet (ctl takeownership), which checks
 * the server by other means straight after.
 */
export type ServerIdentity = { ca: X509Certificate; verify: (certificate: X509Certificate) => string | undefined } | "unverified";

export interface ClientTlsOptions {
  server: ServerIdentity;
  /** The client's certificate and key (a cluster certificate, or self-signed for the handshake calls). */
  certificate?: X509Certificate;
  privateKey?: KeyObject;
}

export class ServerIdentityError extends Error {
  override name = "ServerIdentityError";
}

export function channelCredentials(options: ClientTlsOptions): ChannelCredentials {
  const { server } = options;
  const ca = server === "unverified" ? null : Buffer.from(server.ca.toString());
  const key = options.privateKey ? Buffer.from(options.privateKey.export({ format: "pem", type: "pkcs8" }).toString()) : null;
  const cert = options.certificate ? Buffer.from(options.certificate.toString()) : null;
  return ChannelCredentials.createSsl(ca, key, cert, {
    // The chain is checked by TLS (rejectUnauthorized); who the server is,
    // here, on its certificate, never through a shared host name.
    checkServerIdentity: (_host, peer) => {
      if (server === "unverified") return undefined;
      const certificate = peerCertificateOf(peer);
      if (!certificate) return new ServerIdentityError("the server presented no certificate");
      const problem = server.verify(certificate);
      return problem === undefined ? undefined : new ServerIdentityError(`server identity refused: ${problem}`);
    },
    rejectUnauthorized: ca !== null,
  });
}

/** Channel options every client uses; `serverName` is the SNI (see UNNAMED_SERVER_SNI). */
export function channelOptions(serverName = UNNAMED_SERVER_SNI): ChannelOptions {
  return { "grpc.ssl_target_name_override": serverName, "grpc.default_authority": serverName };
}

/** The client certificate of a call, if the client sent one. */
export function peerCertificateOf(peer: PeerCertificate | undefined): X509Certificate | undefined {
  if (!peer?.raw || peer.raw.length === 0) return undefined;
  try {
    return new X509Certificate(peer.raw);
  } catch {
    return undefined;
  }
}

/**
 * The connection a server call arrived on: its HTTP/2 session (one per
 * connection, the same object for every call on it) and its TLS socket,
 * which shows the client certificate whoever issued it.
 *
 * grpc-js's getAuthContext() shows the client certificate only when it
 * chains to a CA given to the TLS server, but the handshake calls must see
 * self-signed certificates too. So this reads the call's TLS socket, which
 * grpc-js keeps on its innermost call object. The grpc-js version is
 * pinned, and the adapter's tests fail loudly if that layout changes.
 */
export function connectionOf(call: object): { session: object; socket: TLSSocket | Socket } {
  type Inner = { stream?: { session?: { socket?: unknown } }; nextCall?: Inner; call?: Inner };
  let inner: Inner | undefined = (call as Inner).call;
  for (let depth = 0; inner && !inner.stream && depth < 8; depth++) inner = inner.nextCall;
  const session = inner?.stream?.session;
  const socket = session?.socket;
  if (session && socket instanceof TLSSocket) return { session, socket };
  // A local service's unix socket (listenLocal): a plain stream socket with no address.
  if (session && socket instanceof Socket && socket.remoteAddress === undefined && !(socket as { encrypted?: boolean }).encrypted) return { session, socket };
  throw new Error("cannot find the TLS socket of a grpc-js call (did the grpc-js version change?)");
}
