// A three-node cluster of node processes, formed as an operator would with
// ctl: node 1 bootstraps, the owner takes ownership, nodes 2 and 3 register
// with a ticket, are approved and get the consensus role one after the
// other. For benches that need a formed cluster to work on or time its
// formation (onStep: "node1 UP", "node2 UP", "node2 etcd serving", ...,
// "three consensus members"); the process test (cluster_process.test.ts)
// walks the same steps with assertions.

import { fromBinary } from "@bufbuild/protobuf";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { loadCredentials } from "../../internal/cluster/mod.ts";
import type { Etcd3 } from "etcd3";
import { clientUrl, connectEtcd } from "../../internal/consensus/mod.ts";
import { etcdMembers, type EtcdMember } from "../../internal/curator/mod.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey } from "../../internal/pki/mod.ts";
import { loadEtcdMemberState } from "../../internal/roleserve/mod.ts";
import { eventually } from "../../internal/testing/mod.ts";
import { NodeProcess, ctl as runCtl, loopbackBlock } from "./node_process.ts";

export interface ProcessCluster {
  nodes: NodeProcess[];
  /** Node IDs, as the cluster knows them. */
  ids: Map<NodeProcess, string>;
  ctlDir: string;
  ownerKeyFile: string;
  ctl(...args: string[]): ReturnType<typeof runCtl>;
  /** etcd's member list, asked through a node's own etcd member. */
  etcdMembers(via: NodeProcess): Promise<EtcdMember[]>;
  stop(): Promise<void>;
}

/** A client of a node's own etcd member, with the node's credentials (the node must be a consensus member). */
export function etcdClientOf(node: NodeProcess): Promise<Etcd3> {
  const credentials = loadCredentials(node.layout)!;
  const member = loadEtcdMemberState(node.layout)!;
  return connectEtcd({ endpoints: [clientUrl(node.address)], tls: { ca: member.ca, certificate: member.certificate, privateKey: credentials.privateKey } });
}

/** etcd's member list, asked through a node's own etcd member with the node's credentials. */
export async function etcdMembersVia(via: NodeProcess): Promise<EtcdMember[]> {
  const client = await etcdClientOf(via);
  try {
    return await etcdMembers(client);
  } finally {
    client.close();
  }
}

/** Forms the cluster in `dir`; node i listens on the loopback address `<block>.<firstHost + i>`. */
export async function formProcessCluster(
  dir: string,
  firstHost: number,
  onStep: (step: string) => void = () => {},
  options: {
    /** Runs for each node before it first starts (the fault suite mounts a data file system here). */
    prepare?: (node: NodeProcess) => Promise<void>;
    /** How many of the three hold the consensus role (default 3); the others are plain members. */
    consensus?: 1 | 2 | 3;
    /** Added to every node's environment. */
    env?: Record<string, string>;
  } = {},
): Promise<ProcessCluster> {
  const address = loopbackBlock();
  const nodes = [1, 2, 3].map((i) => new NodeProcess(`node${i}`, join(dir, `node${i}`), address(firstHost + i)));
  for (const node of nodes) await options.prepare?.(node);
  const [node1, ...joiners] = nodes as [NodeProcess, NodeProcess, NodeProcess];
  const owner = generateKeyPair();
  const ownerKeyFile = join(dir, "owner.key");
  writeFileSync(ownerKeyFile, privateKeyPem(owner.privateKey));
  const ctlDir = join(dir, "ctl");
  const ctl = async (...args: string[]) => {
    const result = await runCtl(ctlDir, "--owner-key", ownerKeyFile, ...args);
    if (result.code !== 0) throw new Error(`ctl ${args.join(" ")}: ${result.stderr.trim()}`);
    return result;
  };
  const ids = new Map<NodeProcess, string>();
  const cluster: ProcessCluster = {
    nodes,
    ids,
    ctlDir,
    ownerKeyFile,
    ctl,
    etcdMembers: etcdMembersVia,
    stop: async () => void (await Promise.all(nodes.map((n) => n.stop()))),
  };
  try {
    node1.writeParameters({ cluster: { case: "clusterBootstrap", value: { ownerPublicKey: rawPublicKey(owner.publicKey) } } } as never);
    node1.start(options.env);
    await node1.waitForLog((l) => l.msg === "node is UP");
    onStep("node1 UP");
    await ctl("takeownership", node1.address);
    await ctl("params", "register", join(dir, "register.pb"));
    const params = fromBinary(NodeParametersSchema, readFileSync(join(dir, "register.pb")));
    for (const node of joiners) {
      node.writeParameters(params);
      node.start(options.env);
    }
    for (const node of joiners) {
      const waiting = await node.waitForLog((l) => l.msg.startsWith("waiting for the owner to approve node"));
      const id = String(waiting.msg).split(" ")[7]!;
      ids.set(node, id);
      await ctl("node", "approve", id);
      await node.waitForLog((l) => l.msg === "node is UP");
      onStep(`${node.name} UP`);
      if (joiners.indexOf(node) + 2 > (options.consensus ?? 3)) continue;
      await eventually(() => ctl("node", "roles", "set", id, "consensus"), { timeoutMs: 120_000, intervalMs: 200 });
      await node.waitForLog((l) => l.msg === "etcd is serving", { timeoutMs: 120_000 });
      onStep(`${node.name} etcd serving`);
    }
    await eventually(
      async () => {
        const list = JSON.parse((await ctl("node", "list", "--json")).stdout) as { id: string; address: string; roles: string[] }[];
        if (list.filter((n) => n.roles.includes("consensus")).length !== (options.consensus ?? 3)) throw new Error("not every consensus member yet");
        ids.set(node1, list.find((n) => n.address === node1.address)!.id);
      },
      { timeoutMs: 120_000, intervalMs: 200 },
    );
    onStep(`${options.consensus ?? 3} consensus members`);
    // The owner's endpoints file lists every curator.
    await eventually(
      async () => {
        const info = await ctl("cluster", "info");
        for (const node of nodes.slice(0, options.consensus ?? 3)) if (!info.stdout.includes(node.address)) throw new Error(`${node.name} is not a curator yet`);
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}
