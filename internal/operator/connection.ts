// Calling the cluster as its owner: mutual TLS with the owner certificate,
// trying each known curator until one answers (and, for writes, leads).
// Every curator must prove it is one (internal/curator/client).

import { X509Certificate } from "node:crypto";
import type { DescService } from "@bufbuild/protobuf";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import {
  NoCuratorError,
  callAnyCurator,
  type CuratorPool,
  type DialCredentials,
  endpointsOfDirectory,
  formatAddress,
  parseEndpoint,
  type CuratorClientOf,
  type CuratorEndpoint,
} from "../curator/client/mod.ts";
import { selfSignedCertificate, verifyIssuedBy, type KeyPair } from "../pki/mod.ts";
import { deadlineReason, RpcError, Status, channelCredentials, channelOptions, createClient } from "../rpc/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { curatorFailureLine } from "./explain.ts";
import { namespaceHint } from "./network_hint.ts";

/** What the owner dials the curators with. */
export function ownerDialCredentials(credentials: OwnerCredentials): DialCredentials {
  return { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey };
}

/** Per-call deadline unless the caller sets one. */
export const DEFAULT_CALL_TIMEOUT_MS = 15_000;

/**
 * Runs `call` against each curator of the owner's endpoints in turn until
 * one succeeds, reporting each attempt through `progress`. Refusals
 * (permission, not found, ...) are final; unreachable, untrusted or
 * non-leading curators make it try the next one. When none answers, the
 * error says what happened at each, with hints (explain.ts). With `pool`,
 * the calls share its connections (a program that makes many calls as the
 * owner, as the process launcher does); without, each call dials afresh
 * and closes its connections, as one ctl command does.
 */
export async function withFailover<S extends DescService, T>(
  service: S,
  credentials: OwnerCredentials,
  call: (client: CuratorClientOf<S>, endpoint: CuratorEndpoint) => Promise<T>,
  progress: (line: string) => void = () => {},
  pool?: CuratorPool,
): Promise<T> {
  try {
    return pool ? await pool.call(service, credentials.endpoints, call, { progress }) : await callAnyCurator(service, credentials.endpoints, ownerDialCredentials(credentials), call, { progress });
  } catch (err) {
    if (err instanceof NoCuratorError) throw new OperatorError(curatorFailureLine(err, { files: credentials.files }), { cause: err });
    throw err;
  }
}

/**
 * Takes ownership: proves the owner key to a curator, then fetches the
 * curator directory as the owner. On first contact the CA is not known yet,
 * so the escrow call cannot verify the server; the follow-up call trusts
 * only the CA the server returned and requires a curator certificate under
 * it for the address dialled, so a server that merely holds a node
 * certificate, or none from that CA, is refused.
 */
export async function takeOwnership(
  address: string,
  ownerKey: KeyPair,
  options: { timeoutMs?: number } = {},
): Promise<{ certificate: X509Certificate; ca: X509Certificate; endpoints: CuratorEndpoint[] }> {
  const endpoint = parseEndpoint(address);
  const aaa = createClient(AAA, formatAddress(endpoint), {
    credentials: channelCredentials({ server: "unverified", certificate: selfSignedCertificate(ownerKey), privateKey: ownerKey.privateKey }),
    channelOptions: channelOptions(endpoint.nodeId),
  });
  const timeoutMs = options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
  let response;
  try {
    response = await aaa.escrow({}, { timeoutMs });
  } catch (err) {
    throw unreached(err, endpoint) ?? err;
  } finally {
    aaa.close();
  }
  const ca = new X509Certificate(response.caCertificate);
  const certificate = new X509Certificate(response.ownerCertificate);
  if (verifyIssuedBy(certificate, ca) !== undefined) throw new OperatorError("the owner certificate returned is not signed by the returned CA");
  let info;
  try {
    info = await withFailover(Management, { key: ownerKey, certificate, ca, endpoints: [endpoint] }, (m) => m.getClusterInfo({}, { timeoutMs: options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS }));
  } catch (err) {
    throw new OperatorError(`not trusting ${formatAddress(endpoint)}: it did not prove to be a curator of the cluster whose CA it returned: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const endpoints = endpointsOfDirectory(info.clusterDirectory, endpoint.port);
  return { certificate, ca, endpoints: endpoints.length ? endpoints : [endpoint] };
}

/** The error for a node that could not be reached at all (refused, no route, no answer), naming why; undefined for other errors. */
function unreached(err: unknown, endpoint: CuratorEndpoint): OperatorError | undefined {
  if (!(err instanceof RpcError)) return undefined;
  const address = formatAddress(endpoint);
  const failure = err.connectionFailure;
  let reason: string;
  if (failure) reason = failure.kind === "refused" ? `connection refused at ${address}` : failure.reason;
  else if (err.code === Status.DEADLINE_EXCEEDED) reason = deadlineReason(err.details);
  else return undefined;
  // Refused, no route or no answer: perhaps ctl runs outside the cluster's network namespace.
  const hint = failure === undefined || failure.kind === "refused" || failure.kind === "unreachable" ? namespaceHint([endpoint.host]) : undefined;
  return new OperatorError(`could not reach ${address}: ${reason}${hint ? `; ${hint}` : ""}`, { cause: err });
}
