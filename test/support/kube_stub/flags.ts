// The stand-in's idea of each component's command line: which flags it
// knows (a real component refuses unknown ones, so the stand-in does too)
// and which a secure setup must give it, with the values that setup needs.
// Written from the upstream documentation, not from the node core's flag
// builders, so a test against the stand-in checks the builders rather than
// repeating them.

import { StubError } from "./checks.ts";

export type Component = "kube-apiserver" | "kube-controller-manager" | "kube-scheduler" | "kubelet";
export const COMPONENTS: readonly Component[] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"];

interface FlagSpec {
  /** Flags a secure setup must pass, each with a check of its value (undefined: any non-empty value). */
  required: Record<string, ((value: string) => string | undefined) | undefined>;
  /** Flags that may be passed. */
  optional: readonly string[];
}

const listIncludes = (...items: string[]) => (value: string) => {
  const list = value.split(",");
  const missing = items.filter((i) => !list.includes(i));
  return missing.length ? `must include ${missing.join(", ")}` : undefined;
};
const equals = (expected: string) => (value: string) => (value === expected ? undefined : `must be ${expected}`);
const httpsUrl = (value: string) => (/^https:\/\/[^/\s]+/.test(value) ? undefined : "must be an https URL");
const httpsUrls = (value: string) => (value.split(",").every((v) => httpsUrl(v) === undefined) ? undefined : "must be https URLs (etcd over TLS)");
const port = (value: string) => (/^\d+$/.test(value) && Number(value) > 0 && Number(value) < 65536 ? undefined : "must be a port number");

/** A controller-manager's or scheduler's identity and serving: one kubeconfig for all three uses, its own TLS. */
const CLIENT_COMPONENT = Object.fromEntries(
  ["kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig", "bind-address", "tls-cert-file", "tls-private-key-file", "client-ca-file"].map((f) => [f, undefined]),
);

export const FLAG_SPECS: Record<Component, FlagSpec> = {
  "kube-apiserver": {
    required: {
      "advertise-address": undefined,
      "bind-address": undefined,
      "secure-port": port,
      "tls-cert-file": undefined,
      "tls-private-key-file": undefined,
      "client-ca-file": undefined,
      "authorization-mode": listIncludes("Node", "RBAC"),
      "enable-admission-plugins": listIncludes("NodeRestriction"),
      "etcd-servers": httpsUrls,
      "etcd-cafile": undefined,
      "etcd-certfile": undefined,
      "etcd-keyfile": undefined,
      "kubelet-client-certificate": undefined,
      "kubelet-client-key": undefined,
      "kubelet-certificate-authority": undefined,
      "service-account-issuer": httpsUrl,
      "service-account-key-file": undefined,
      "service-account-signing-key-file": undefined,
      "service-cluster-ip-range": undefined,
      "requestheader-client-ca-file": undefined,
      "requestheader-allowed-names": undefined,
      "proxy-client-cert-file": undefined,
      "proxy-client-key-file": undefined,
    },
    optional: [
      "anonymous-auth",
      "etcd-prefix",
      "kubelet-preferred-address-types",
      "requestheader-username-headers",
      "requestheader-group-headers",
      "requestheader-extra-headers-prefix",
      "profiling",
      "allow-privileged",
      "tls-min-version",
    ],
  },
  "kube-controller-manager": {
    required: {
      ...CLIENT_COMPONENT,
      "secure-port": port,
      "root-ca-file": undefined,
      "service-account-private-key-file": undefined,
      "use-service-account-credentials": equals("true"),
      "cluster-cidr": undefined,
      "service-cluster-ip-range": undefined,
      "allocate-node-cidrs": equals("true"),
    },
    optional: ["requestheader-client-ca-file", "leader-elect", "profiling", "controllers"],
  },
  "kube-scheduler": {
    required: {
      ...CLIENT_COMPONENT,
      "secure-port": port,
    },
    optional: ["leader-elect", "profiling", "requestheader-client-ca-file"],
  },
  kubelet: {
    required: {
      config: undefined,
      kubeconfig: undefined,
      "root-dir": undefined,
      // The node's name must be the one its certificate carries (the Node authorizer).
      "hostname-override": undefined,
      "node-ip": undefined,
    },
    optional: ["v"],
  },
};

/** Parses `--name=value` arguments against the component's spec; StubError names the first problem. */
export function parseFlags(component: Component, args: readonly string[]): Record<string, string> {
  const spec = FLAG_SPECS[component];
  const flags: Record<string, string> = {};
  for (const arg of args) {
    const match = /^--([a-z0-9-]+)=(.*)$/s.exec(arg);
    if (!match) throw new StubError(`argument ${JSON.stringify(arg)} is not of the form --flag=value`);
    const [, name, value] = match as unknown as [string, string, string];
    if (!(name in spec.required) && !spec.optional.includes(name)) throw new StubError(`unknown flag --${name}`);
    if (name in flags) throw new StubError(`--${name} given twice`);
    flags[name] = value;
  }
  for (const [name, check] of Object.entries(spec.required)) {
    const value = flags[name];
    if (value === undefined || value === "") throw new StubError(`--${name} is required for a secure setup and was not given`);
    const problem = check?.(value);
    if (problem) throw new StubError(`--${name}=${value}: ${problem}`);
  }
  return flags;
}
