// Connecting to etcd with mutual TLS under the etcd peer CA.
//
// etcd3 is loaded on first use, not with the binary: evaluating it (its
// gRPC service definitions are built from etcd's protos at load time) is
// the largest single part of the node core's start-up, about 3 s of a VM's
// boot under emulation, and only consensus members ever talk to etcd.

import type { Etcd3, IOptions } from "etcd3";
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
  execute: <T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T, signal?: AbortSignal) => Promise.resolve().then(() => fn({ signal: signal ?? new AbortController().signal })),
  onSuccess: () => ({ dispose() {} }),
  onFailure: () => ({ dispose() {} }),
} as unknown as HostPolicy;

let etcd3Module: Promise<typeof import("etcd3")> | undefined;

/** The etcd3 module, loaded once on first call. */
export function loadEtcd3(): Promise<typeof import("etcd3")> {
  etcd3Module ??= import("etcd3");
  return etcd3Module;
}

export async function connectEtcd(options: { endpoints: string[]; tls: EtcdTls }): Promise<Etcd3> {
  const { Etcd3 } = await loadEtcd3();
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
