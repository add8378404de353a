// The NetworkPolicy step of the cluster e2e (issue 51): what a user does to
// isolate a server, as kubectl would, against the Kubernetes step's marker
// pods (one on each worker, each serving its page on port 8080).
//
//   node2's marker ─(mesh)─┐
//                          ├──▶ node3's marker (the server)
//   node3's neighbour ─────┘    (the same node: through its bridge, not the mesh)
//
//   no policy                            both reach it (and the neighbour proves the bridge path)
//   ingress: only pods labelled          both refused
//     access=granted in default, :8080
//   node2's marker labelled              node2's marker reaches it; the neighbour is still refused
//   egress of node2's marker: only       it still reaches the server; the apiserver's ClusterIP
//     the server's /32, :8080              (node1, after DNAT) is refused
//   policies deleted                     the neighbour reaches it again
//
// Each change's time to take effect is measured: a policy is enforced by
// every worker's kube-network-policies from its informers, so it is seconds.

import { eventually } from "../../internal/testing/mod.ts";
import { TEST_IMAGE_REF } from "../../internal/containerd/mod.ts";
import { httpBody, httpGetCommand } from "../launch/pod_http.ts";
import { assert, assertEqual } from "./harness.ts";

const SERVER_PORT = 8080;
const NEIGHBOUR = "np-neighbour";
const INGRESS_POLICY = "marker-ingress";
const EGRESS_POLICY = "marker-egress";
/** The label the ingress policy lets in. */
const GRANTED = { key: "access", value: "granted" } as const;
/** How often a change's effect is looked for: each refused try already waits out nc's 5 s. */
const POLL_MS = 1_000;

export interface NetworkPolicyWorkers {
  ids: readonly string[];
  /** The marker pods: names[0] on ids[0] (node2), names[1] on ids[1] (node3). */
  names: readonly string[];
  pages: readonly string[];
}

export interface NetworkPolicyIo {
  kubectl: (...args: string[]) => Promise<string>;
  /** Writes a manifest; returns its path for `kubectl apply -f`. */
  manifest: (name: string, body: unknown) => string;
}

export interface NetworkPolicyFigures {
  deniedMs: number;
  grantedMs: number;
  egressMs: number;
  liftedMs: number;
}

function ingressPolicy(server: string): unknown {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: INGRESS_POLICY },
    spec: {
      podSelector: { matchLabels: { app: server } },
      policyTypes: ["Ingress"],
      ingress: [
        {
          // Both selectors in one peer: a pod with the label, in the namespace default.
          from: [{ podSelector: { matchLabels: { [GRANTED.key]: GRANTED.value } }, namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "default" } } }],
          ports: [{ protocol: "TCP", port: SERVER_PORT }],
        },
      ],
    },
  };
}

function egressPolicy(client: string, serverIp: string): unknown {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: EGRESS_POLICY },
    spec: {
      podSelector: { matchLabels: { app: client } },
      policyTypes: ["Egress"],
      egress: [{ to: [{ ipBlock: { cidr: `${serverIp}/32` } }], ports: [{ protocol: "TCP", port: SERVER_PORT }] }],
    },
  };
}

/** A pod on `nodeId` that only stays: the server's neighbour on its own node. */
function neighbourPod(nodeId: string): unknown {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: NEIGHBOUR, labels: { app: NEIGHBOUR } },
    spec: {
      nodeName: nodeId,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: "main", image: TEST_IMAGE_REF, imagePullPolicy: "Never", command: ["sh", "-c", "exec sleep 3600"] }],
    },
  };
}

export async function networkPolicyStep(io: NetworkPolicyIo, workers: NetworkPolicyWorkers, waitMs: number): Promise<NetworkPolicyFigures> {
  const { kubectl, manifest } = io;
  const [client, server] = [workers.names[0]!, workers.names[1]!];
  const page = workers.pages[1]!;
  /** Whether `from` gets the server's page from `host:port` (a dropped connection: nc gives up after 5 s). */
  const reaches = async (from: string, host: string, port: number): Promise<boolean> => {
    const answer = await kubectl("exec", from, "--", "sh", "-c", `${httpGetCommand(host, port)} || true`);
    try {
      return httpBody(answer, `${host}:${port} from ${from}`) === page;
    } catch {
      return false;
    }
  };
  const until = <T>(what: string, check: () => Promise<T>) => eventually(check, { timeoutMs: waitMs, intervalMs: POLL_MS, what });
  try {
    await kubectl("apply", "-f", manifest("np-neighbour.json", neighbourPod(workers.ids[1]!)));
    const serverIp = (await kubectl("get", "pod", server, "-o", "jsonpath={.status.podIP}")).trim();
    await until(`${NEIGHBOUR} Running`, async () => assertEqual((await kubectl("get", "pod", NEIGHBOUR, "-o", "jsonpath={.status.phase}")).trim(), "Running", `${NEIGHBOUR}'s phase`));
    // Without a policy everything is allowed, on the bridge as across the mesh.
    await until(`${NEIGHBOUR} reaching ${server} on its own node`, async () => assert(await reaches(NEIGHBOUR, serverIp, SERVER_PORT), `${NEIGHBOUR} reaches ${server} before any policy`));
    assert(await reaches(client, serverIp, SERVER_PORT), `${client} reaches ${server} before any policy`);

    let since = performance.now();
    await kubectl("apply", "-f", manifest("np-ingress.json", ingressPolicy(server)));
    await until("both clients refused by the ingress policy", async () => {
      assert(!(await reaches(client, serverIp, SERVER_PORT)), `${client} (across the mesh) is refused`);
      assert(!(await reaches(NEIGHBOUR, serverIp, SERVER_PORT)), `${NEIGHBOUR} (the same node's bridge) is refused`);
    });
    const deniedMs = performance.now() - since;

    since = performance.now();
    await kubectl("label", "pod", client, `${GRANTED.key}=${GRANTED.value}`);
    await until(`${client} let in once labelled`, async () => assert(await reaches(client, serverIp, SERVER_PORT), `${client}, labelled ${GRANTED.key}=${GRANTED.value}, reaches ${server}`));
    const grantedMs = performance.now() - since;
    assert(!(await reaches(NEIGHBOUR, serverIp, SERVER_PORT)), `${NEIGHBOUR}, not labelled, is still refused`);

    since = performance.now();
    await kubectl("apply", "-f", manifest("np-egress.json", egressPolicy(client, serverIp)));
    // The apiserver's ClusterIP is node1's address after kube-proxy's DNAT: outside the ipBlock.
    await until(`${client}'s egress to the apiserver refused`, async () => {
      const answer = await kubectl("exec", client, "--", "sh", "-c", `${httpGetCommand("10.96.0.1", 443)} || true`);
      assertEqual(answer.trim(), "", `${client} → 10.96.0.1:443 under the egress policy (the answer)`);
    });
    const egressMs = performance.now() - since;
    assert(await reaches(client, serverIp, SERVER_PORT), `${client} still reaches ${server}: its ipBlock and the ingress label allow it`);

    since = performance.now();
    await kubectl("delete", "networkpolicy", INGRESS_POLICY, EGRESS_POLICY);
    await until(`${NEIGHBOUR} let in again once the policies are gone`, async () => assert(await reaches(NEIGHBOUR, serverIp, SERVER_PORT), `${NEIGHBOUR} reaches ${server} again`));
    const liftedMs = performance.now() - since;
    return { deniedMs, grantedMs, egressMs, liftedMs };
  } finally {
    // The marker pods serve the steps after this one as they were.
    await kubectl("delete", "networkpolicy", INGRESS_POLICY, EGRESS_POLICY, "--ignore-not-found").catch(() => "");
    await kubectl("label", "pod", client, `${GRANTED.key}-`).catch(() => "");
    await kubectl("delete", "pod", NEIGHBOUR, "--ignore-not-found", "--wait=false").catch(() => "");
  }
}
