// Connecting to etcd with mutual TLS under the etcd peer CA.

import { Etcd3, type IOptions } from "etcd3";
import { privateKeyPem } from "../pki/mod.ts";
import { ETCD_SERVER_NAME, type EtcdTls } from "./certificates.ts";

/** A single etcd call's deadline. */
export const ETCD_CALL_TIMEOUT_MS = 5_000;

type HostPolicy = ReturnType<NonNullable<NonNullable<IOptions["faultHandling"]>["host"]>>;

/**
 * A per-host policy that lets every call through. The etcd3 default is a
 * circuit breaker that refuses all calls for 5 s after three failures in a
 * row; our clients talk to one member (the node's own), so during an etcd
 * election that breaker only added 5 s of blindness after etcd was back.
 * Calls keep their deadline and the client's three retries.
 */
const passThrough = {
  execute: <T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T, signal?: AbortSignal) =>
    Promise.resolve().then(() => fn({ signal: signal ?? new AbortController().signal })),
  onSuccess: () => ({ dispose() {} }),
  onFailure: () => ({ dispose() {} }),
} as unknown as HostPolicy;

export function connectEtcd(options: { endpoints: string[]; tls: EtcdTls }): Etcd3 {
  return new Etcd3({
    hosts: options.endpoints,
    credentials: {
      rootCertificate: Buffer.from(options.tls.ca.toString()),
      certChain: Buffer.from(options.tls.certificate.toString()),
      privateKey: Buffer.from(privateKeyPem(options.tls.privateKey)),
    },
    grpcOptions: { "grpc.ssl_target_name_override": ETCD_SERVER_NAME, "grpc.default_authority": ETCD_SERVER_NAME },
    faultHandling: { host: () => passThrough },
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: new Date(Date.now() + ETCD_CALL_TIMEOUT_MS) }),
  });
}
