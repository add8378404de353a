// Kubeconfigs, built in memory: one cluster, one user, one context, with
// every certificate and key embedded, so that a kubeconfig is one file and
// needs no others beside it. JSON is valid YAML, and kubectl and every
// Kubernetes component read it as a kubeconfig.

import type { KeyObject, X509Certificate } from "node:crypto";
import { privateKeyPem, toPem } from "../pki/mod.ts";

export const KUBECONFIG_CLUSTER = "nodecore";

export interface KubeconfigOptions {
  /** https://host:port of an apiserver. */
  server: string;
  /** The CA that the apiserver's serving certificate chains to. */
  ca: X509Certificate;
  /** The user's client certificate and key. */
  certificate: X509Certificate;
  privateKey: KeyObject;
  /** The name of the user entry (and of the context); the apiserver takes the user from the certificate. */
  user: string;
}

const base64 = (text: string) => Buffer.from(text).toString("base64");

export function buildKubeconfig(options: KubeconfigOptions): string {
  const context = `${options.user}@${KUBECONFIG_CLUSTER}`;
  const config = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: KUBECONFIG_CLUSTER, cluster: { server: options.server, "certificate-authority-data": base64(toPem(options.ca)) } }],
    users: [
      {
        name: options.user,
        user: { "client-certificate-data": base64(toPem(options.certificate)), "client-key-data": base64(privateKeyPem(options.privateKey)) },
      },
    ],
    contexts: [{ name: context, context: { cluster: KUBECONFIG_CLUSTER, user: options.user } }],
    "current-context": context,
    preferences: {},
  };
  return JSON.stringify(config, null, 2) + "\n";
}

export interface ParsedKubeconfig {
  server: string;
  ca: string;
  certificate: string;
  privateKey: string;
}

/** The current context's server and credentials, as PEM (the stand-in and tests read kubeconfigs with this). */
export function parseKubeconfig(text: string): ParsedKubeconfig {
  const config = JSON.parse(text) as {
    clusters?: { name: string; cluster: Record<string, string> }[];
    users?: { name: string; user: Record<string, string> }[];
    contexts?: { name: string; context: { cluster: string; user: string } }[];
    "current-context"?: string;
  };
  const context = config.contexts?.find((c) => c.name === config["current-context"])?.context;
  if (!context) throw new Error(`kubeconfig has no context named ${JSON.stringify(config["current-context"])}`);
  const cluster = config.clusters?.find((c) => c.name === context.cluster)?.cluster;
  const user = config.users?.find((u) => u.name === context.user)?.user;
  if (!cluster?.server || !cluster["certificate-authority-data"]) throw new Error(`kubeconfig cluster ${context.cluster} lacks a server or CA`);
  if (!user?.["client-certificate-data"] || !user["client-key-data"]) throw new Error(`kubeconfig user ${context.user} lacks a client certificate or key`);
  const decode = (b: string) => Buffer.from(b, "base64").toString();
  return {
    server: cluster.server,
    ca: decode(cluster["certificate-authority-data"]),
    certificate: decode(user["client-certificate-data"]),
    privateKey: decode(user["client-key-data"]),
  };
}
