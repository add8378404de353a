// @kubernetes/client-node's configuration for one apiserver and one client
// identity, for the node core's own clients of Kubernetes (the reconciler
// as the admin, each worker's volume provisioner as itself).
//
// Requests go through bun's fetch with the client certificate given
// directly: the library's own HTTP layer hands its TLS settings to undici
// as a dispatcher, which bun's fetch ignores, so the CA and the client
// certificate would never be used. @kubernetes/client-node is loaded by the
// caller on first use (a dynamic import), so that nodes that never talk to
// Kubernetes never pay for loading it.

import type { KeyObject, X509Certificate } from "node:crypto";
import { privateKeyPem, toPem } from "../pki/mod.ts";

export type ClientNode = typeof import("@kubernetes/client-node");

/** One request's deadline. */
export const REQUEST_TIMEOUT_MS = 10_000;

/** Who a client is to the apiserver, and the CA its serving certificate chains to. */
export interface ClientIdentity {
  ca: X509Certificate;
  certificate: X509Certificate;
  privateKey: KeyObject;
}

export function clientConfiguration(k8s: ClientNode, server: string, identity: ClientIdentity) {
  const tls = { ca: toPem(identity.ca), cert: toPem(identity.certificate), key: privateKeyPem(identity.privateKey) };
  const httpApi = k8s.wrapHttpLibrary({
    async send(request) {
      const response = await fetch(request.getUrl(), {
        method: request.getHttpMethod().toString(),
        headers: request.getHeaders(),
        body: request.getBody() as string | undefined,
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        tls,
      } as RequestInit);
      const headers: Record<string, string> = {};
      response.headers.forEach((value, name) => (headers[name] = value));
      const body = Buffer.from(await response.arrayBuffer());
      return new k8s.ResponseContext(response.status, headers, {
        text: async () => body.toString(),
        binary: async () => body,
        stream: () => null,
      });
    },
  });
  return k8s.createConfiguration({ baseServer: new k8s.ServerConfiguration(server, {}), httpApi });
}

/** HTTP status of a client-node error, if it has one. */
export function statusOf(error: unknown): number | undefined {
  const code = (error as { code?: unknown }).code;
  return typeof code === "number" ? code : undefined;
}

/**
 * A read's catch for an object that may not exist: a 404 is `undefined`,
 * any other failure is thrown again naming `what` (`Service kube-system/x`).
 */
export function absentAs(what: string): (error: unknown) => undefined {
  return (error) => {
    if (statusOf(error) === 404) return undefined;
    throw new Error(`could not read ${what}: ${(error as Error).message}`, { cause: error });
  };
}

/** A replacement's resourceVersion: the one the existing object has, so that a concurrent change fails the replace instead of being lost. */
export function sameVersion(metadata: { resourceVersion?: string | undefined } | undefined): { resourceVersion?: string } {
  return metadata?.resourceVersion !== undefined ? { resourceVersion: metadata.resourceVersion } : {};
}
