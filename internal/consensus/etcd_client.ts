// Connecting to etcd with mutual TLS under the etcd peer CA.

import { Etcd3 } from "etcd3";
import { privateKeyPem } from "../pki/mod.ts";
import { ETCD_SERVER_NAME, type EtcdTls } from "./certificates.ts";

/** A single etcd call's deadline. */
export const ETCD_CALL_TIMEOUT_MS = 5_000;

export function connectEtcd(options: { endpoints: string[]; tls: EtcdTls }): Etcd3 {
  return new Etcd3({
    hosts: options.endpoints,
    credentials: {
      rootCertificate: Buffer.from(options.tls.ca.toString()),
      certChain: Buffer.from(options.tls.certificate.toString()),
      privateKey: Buffer.from(privateKeyPem(options.tls.privateKey)),
    },
    grpcOptions: { "grpc.ssl_target_name_override": ETCD_SERVER_NAME, "grpc.default_authority": ETCD_SERVER_NAME },
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: new Date(Date.now() + ETCD_CALL_TIMEOUT_MS) }),
  });
}
