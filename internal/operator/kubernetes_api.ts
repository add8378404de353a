// The owner's own requests to the Kubernetes API, from ctl: a short-lived
// client certificate as nodecore:owner (ctl kubeconfig's identity, made over
// a key that never leaves this process and is never written), and plain
// HTTPS with bun's fetch to the apiservers the cluster names, the next one
// when one does not answer. No @kubernetes/client-node: ctl reads and writes
// a few objects, and loading that library costs every ctl command its start.

import { X509Certificate } from "node:crypto";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey, toPem } from "../pki/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import { explain } from "./explain.ts";
import type { CallSettings } from "./nodes.ts";

/** An answer from the apiserver: its status and its body, parsed when it is JSON. */
export interface KubernetesAnswer {
  status: number;
  body: unknown;
}

export interface OwnerKubernetes {
  /** One request, to the first apiserver that answers it below 500 (one that does not answer, or fails as a server, is passed over). */
  request(method: "GET" | "POST" | "PATCH" | "DELETE", path: string, body?: unknown, contentType?: string): Promise<KubernetesAnswer>;
  apiservers: readonly string[];
}

/** A status's message ("Cannot evict pod as it would violate the pod's disruption budget."), for errors. */
export function statusMessage(answer: KubernetesAnswer): string {
  const message = (answer.body as { message?: unknown } | undefined)?.message;
  return typeof message === "string" ? message.slice(0, 300) : `HTTP ${answer.status}`;
}

/** ownerKubernetes, made on the first call and shared by the later ones; not made at all when no caller needs it. */
export function ownerKubernetesOnce(credentials: OwnerCredentials, settings: CallSettings): () => Promise<OwnerKubernetes> {
  let made: Promise<OwnerKubernetes> | undefined;
  return () => (made ??= ownerKubernetes(credentials, settings));
}

/** The owner's Kubernetes access, or an OperatorError saying why there is none (no controller, no answer). */
export async function ownerKubernetes(credentials: OwnerCredentials, settings: CallSettings): Promise<OwnerKubernetes> {
  const key = generateKeyPair();
  const response = await withFailover(Management, credentials, (m) => m.getKubernetesCredentials({ publicKey: rawPublicKey(key.publicKey) }, { timeoutMs: settings.timeoutMs }), settings.progress);
  if (response.apiservers.length === 0) throw new OperatorError("no UP node holds both the kubernetes-controller and the consensus role: there is no apiserver to ask");
  const tls = {
    ca: toPem(new X509Certificate(response.caCertificate)),
    cert: toPem(new X509Certificate(response.clientCertificate)),
    key: privateKeyPem(key.privateKey),
  };
  const apiservers = [...response.apiservers];
  return {
    apiservers,
    async request(method, path, body, contentType = "application/json") {
      const failures: string[] = [];
      for (const server of apiservers) {
        try {
          const answer = await fetch(`${server}${path}`, {
            method,
            tls,
            signal: AbortSignal.timeout(settings.timeoutMs),
            ...(body !== undefined ? { body: JSON.stringify(body), headers: { "content-type": contentType } } : {}),
          } as RequestInit);
          const text = await answer.text();
          let parsed: unknown = text;
          try {
            parsed = text ? JSON.parse(text) : undefined;
          } catch {
            // Not JSON: kept as text.
          }
          const result = { status: answer.status, body: parsed };
          if (answer.status >= 500) {
            failures.push(`${server}: ${statusMessage(result)}`);
            continue;
          }
          return result;
        } catch (err) {
          failures.push(`${server}: ${explain(err).line}`);
        }
      }
      throw new OperatorError(`no apiserver answered ${method} ${path} (${failures.join("; ")})`);
    },
  };
}
