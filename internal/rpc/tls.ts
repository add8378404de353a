// TLS for every API: the server asks every client for a certificate but lets
// the handshake finish without one (or with one not under the cluster CA), so
// that the two handshake calls (AAA.Escrow and Curator.RegisterNode/
// CommitNode/JoinNode) can authenticate callers by a self-signed certificate.
// Every other call is refused unless the certificate chains to the cluster CA
// (checked per call by authenticate() in peer.ts).

import { ChannelCredentials, ServerCredentials, type ChannelOptions } from "@grpc/grpc-js";
import { TLSSocket, type PeerCertificate, type SecureContextOptions } from "node:tls";
import { X509Certificate } from "node:crypto";
import type { KeyObject } from "node:crypto";

/**
 * The TLS server name clients ask for. bun's TLS refuses an IP address as
 * server name, and nodes are dialled by IP, so every node certificate carries
 * this DNS name and clients always verify against it.
 */
export const CLUSTER_SERVER_NAME = "cluster.nodecore.internal";

/** Server credentials that request, but do not require, a client certificate. */
class OptionalClientCertificateCredentials extends ServerCredentials {
  constructor(contextOptions: SecureContextOptions) {
    // Chain checks happen per call: some calls accept self-signed certificates.
    super({ requestCert: true, rejectUnauthorized: false }, contextOptions);
  }
  _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}

export interface ServerTlsOptions {
  /** This server's certificate and key. */
  certificate: X509Certificate;
  privateKey: KeyObject;
}

export function serverCredentials(options: ServerTlsOptions): ServerCredentials {
  return new OptionalClientCertificateCredentials({
    cert: options.certificate.toString(),
    key: options.privateKey.export({ format: "pem", type: "pkcs8" }).toString(),
  });
}

export interface ClientTlsOptions {
  /** The CA the server's certificate must chain to; absent only when the caller cannot know it yet. */
  ca?: X509Certificate;
  /** The client's certificate and key (a cluster certificate, or self-signed for the handshake calls). */
  certificate?: X509Certificate;
  privateKey?: KeyObject;
}

export function channelCredentials(options: ClientTlsOptions): ChannelCredentials {
  const ca = options.ca ? Buffer.from(options.ca.toString()) : null;
  const key = options.privateKey ? Buffer.from(options.privateKey.export({ format: "pem", type: "pkcs8" }).toString()) : null;
  const cert = options.certificate ? Buffer.from(options.certificate.toString()) : null;
  return ChannelCredentials.createSsl(ca, key, cert, {
    // Server identity is the CA chain plus the fixed cluster server name.
    checkServerIdentity: () => undefined,
    rejectUnauthorized: ca !== null,
  });
}

/** Channel options every client uses. */
export function channelOptions(): ChannelOptions {
  return { "grpc.ssl_target_name_override": CLUSTER_SERVER_NAME, "grpc.default_authority": CLUSTER_SERVER_NAME };
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
 * The client certificate of a server call, whoever issued it.
 *
 * grpc-js's getAuthContext() shows the client certificate only when it
 * chains to a CA given to the TLS server, but the handshake calls must see
 * self-signed certificates too. So this reads it from the call's TLS socket,
 * which grpc-js keeps on its innermost call object. The grpc-js version is
 * pinned, and the adapter's tests fail loudly if that layout changes.
 */
export function clientCertificateOf(call: object): X509Certificate | undefined {
  type Inner = { stream?: { session?: { socket?: unknown } }; nextCall?: Inner; call?: Inner };
  let inner: Inner | undefined = (call as Inner).call;
  for (let depth = 0; inner && !inner.stream && depth < 8; depth++) inner = inner.nextCall;
  const socket = inner?.stream?.session?.socket;
  if (!(socket instanceof TLSSocket)) {
    throw new Error("cannot find the TLS socket of a grpc-js call (did the grpc-js version change?)");
  }
  return peerCertificateOf(socket.getPeerCertificate());
}
