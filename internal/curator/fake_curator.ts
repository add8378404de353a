// A fake curator for tests: a real grpc-js server over mutual TLS on
// loopback that serves AAA, Management and Curator with only the methods a
// test gives it. Every other method answers UNIMPLEMENTED and names itself
// (rpc's partialService), so a test writes the two handlers it needs, not
// the twenty-five the services have. It records every call that reaches it,
// refused or not.
//
// Test-only, like test_cluster.ts: mod.ts does not export it, and tests
// import it directly.

import type { X509Certificate } from "node:crypto";
import type { DescService } from "@bufbuild/protobuf";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { nodeIdFromPublicKey, rawPublicKey, type KeyPair } from "../pki/mod.ts";
import { addService, createServer, listen, partialService, serverCredentials, type Policy, type ServiceImpl, type ServicePolicy } from "../rpc/mod.ts";
import { formatAddress, type CuratorEndpoint } from "./client/mod.ts";
import { AAA_POLICY } from "./service_aaa.ts";
import { CURATOR_POLICY } from "./service_curator.ts";
import { MANAGEMENT_POLICY } from "./service_management.ts";

export interface FakeCuratorOptions {
  /**
   * The key and certificate it serves with: a curator certificate under the
   * cluster CA makes it a genuine curator; anything else, an impostor that
   * clients must refuse before they call.
   */
  serving: { key: KeyPair; certificate: X509Certificate };
  /** The CA its callers' certificates are checked under. */
  clusterCA: X509Certificate;
  /** Where it listens (on a port of the system's choosing); 127.0.0.1 by default. */
  host?: string;
  aaa?: Partial<ServiceImpl<typeof AAA>>;
  management?: Partial<ServiceImpl<typeof Management>>;
  curator?: Partial<ServiceImpl<typeof Curator>>;
  /**
   * Who may call: the real curator's policies (the default), or any
   * certificate holder, for an impostor that wants to hear every call a
   * client dares to send.
   */
  admits?: "as the curator" | "any certificate";
}

export interface FakeCurator {
  endpoint: CuratorEndpoint;
  /** Every call that reached it, refused or not, as "Service/Method", in order. */
  readonly calls: string[];
  close(): void;
}

const DEFAULT_HOST = "127.0.0.1";

/** Every method of `service` open to any certificate holder. */
function anyCertificate<S extends DescService>(service: S): ServicePolicy<S> {
  return Object.fromEntries(service.methods.map((m): [string, Policy] => [m.localName, "key"])) as ServicePolicy<S>;
}

export async function startFakeCurator(options: FakeCuratorOptions): Promise<FakeCurator> {
  const server = createServer();
  const calls: string[] = [];
  const anyone = options.admits === "any certificate";
  const serve = { ca: () => options.clusterCA, audit: (call: { method: string }) => calls.push(call.method) };
  addService(server, AAA, partialService(AAA, options.aaa ?? {}), { ...serve, policy: anyone ? anyCertificate(AAA) : AAA_POLICY });
  addService(server, Management, partialService(Management, options.management ?? {}), { ...serve, policy: anyone ? anyCertificate(Management) : MANAGEMENT_POLICY });
  addService(server, Curator, partialService(Curator, options.curator ?? {}), { ...serve, policy: anyone ? anyCertificate(Curator) : CURATOR_POLICY });
  const host = options.host ?? DEFAULT_HOST;
  const { key, certificate } = options.serving;
  const { port } = await listen(server, formatAddress({ host, port: 0 }), serverCredentials({ certificate, privateKey: key.privateKey }));
  return { endpoint: { host, port, nodeId: nodeIdFromPublicKey(rawPublicKey(key.publicKey)) }, calls, close: () => server.forceShutdown() };
}
