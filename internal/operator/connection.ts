// Calling the cluster as its owner: mutual TLS with the owner certificate,
// trying each known curator until one answers (and, for writes, leads).

import { X509Certificate } from "node:crypto";
import type { DescService } from "@bufbuild/protobuf";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { CURATOR_PORT } from "../curator/mod.ts";
import { selfSignedCertificate, verifyIssuedBy, type KeyPair } from "../pki/mod.ts";
import { RpcError, Status, channelCredentials, channelOptions, createClient, type ServiceClient } from "../rpc/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";

/** Per-call deadline unless the caller sets one. */
export const DEFAULT_CALL_TIMEOUT_MS = 15_000;
/** How long a curator gets to accept a connection before the next one is tried. */
export const CONNECT_TIMEOUT_MS = 3_000;

/** "10.0.0.2" → "10.0.0.2:7835"; an explicit port is kept. */
export function withCuratorPort(endpoint: string): string {
  if (/^\[.*\]:\d+$/.test(endpoint) || /^[^:]+:\d+$/.test(endpoint)) return endpoint;
  return endpoint.includes(":") ? `[${endpoint}]:${CURATOR_PORT}` : `${endpoint}:${CURATOR_PORT}`;
}

/** Codes after which another curator may do better. */
function worthTryingElsewhere(err: unknown): boolean {
  return err instanceof RpcError && (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED);
}

/**
 * Runs `call` against each endpoint in turn until one succeeds, reporting
 * each attempt through `progress`. Refusals (permission, not found, ...) are
 * final; unreachable or non-leading curators make it try the next one.
 */
export async function withFailover<S extends DescService, T>(
  service: S,
  credentials: OwnerCredentials,
  call: (client: ServiceClient<S>) => Promise<T>,
  progress: (line: string) => void = () => {},
): Promise<T> {
  const failures: string[] = [];
  for (const endpoint of credentials.endpoints.map(withCuratorPort)) {
    progress(`calling ${endpoint} ...`);
    const client = createClient(service, endpoint, {
      credentials: channelCredentials({ ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey }),
      channelOptions: channelOptions(),
    });
    try {
      if (!(await client.ready(CONNECT_TIMEOUT_MS))) {
        failures.push(`${endpoint}: no connection within ${CONNECT_TIMEOUT_MS / 1000} s`);
        continue;
      }
      return await call(client);
    } catch (err) {
      if (!worthTryingElsewhere(err)) throw err;
      failures.push(`${endpoint}: ${(err as RpcError).details}`);
    } finally {
      client.close();
    }
  }
  throw new OperatorError(`cluster unreachable; tried ${failures.length} curator(s):\n  ${failures.join("\n  ")}`);
}

/**
 * Takes ownership: proves the owner key to a curator, then fetches the
 * curator directory as the owner. On first contact the CA is not known yet,
 * so the escrow call cannot verify the server; the follow-up call trusts
 * only the CA the server returned, so a server whose certificate that CA did
 * not issue is refused.
 */
export async function takeOwnership(
  endpoint: string,
  ownerKey: KeyPair,
  options: { timeoutMs?: number } = {},
): Promise<{ certificate: X509Certificate; ca: X509Certificate; endpoints: string[] }> {
  const target = withCuratorPort(endpoint);
  const aaa = createClient(AAA, target, {
    credentials: channelCredentials({ certificate: selfSignedCertificate(ownerKey), privateKey: ownerKey.privateKey }),
    channelOptions: channelOptions(),
  });
  let response;
  try {
    response = await aaa.escrow({}, { timeoutMs: options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS });
  } finally {
    aaa.close();
  }
  const ca = new X509Certificate(response.caCertificate);
  const certificate = new X509Certificate(response.ownerCertificate);
  if (verifyIssuedBy(certificate, ca) !== undefined) throw new OperatorError("the owner certificate returned is not signed by the returned CA");
  let info;
  try {
    info = await withFailover(Management, { key: ownerKey, certificate, ca, endpoints: [target] }, (m) =>
      m.getClusterInfo({}, { timeoutMs: options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS }),
    );
  } catch (err) {
    throw new OperatorError(`the curator at ${target} does not hold a certificate from the CA it returned; not trusting it: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const endpoints = info.clusterDirectory?.nodes.flatMap((n) => n.addresses.map((a) => withCuratorPort(a.host))) ?? [];
  return { certificate, ca, endpoints: endpoints.length ? [...new Set(endpoints)] : [target] };
}
