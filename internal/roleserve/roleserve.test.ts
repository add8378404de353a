// The role server's workers against a fake curator (curator/fake_curator.ts):
// a real grpc-js server over mutual TLS serving the generated Curator
// service, fed by the test.

import { joinCgroup, runtimePaths, unifiedCgroupRoot } from "../containerd/mod.ts";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ClusterDirectorySchema, NodeRolesSchema, type ClusterDirectory, type NodeRoles, type NodeStatus } from "../../proto/gen/common/common_pb.ts";
import { WatchEventSchema, WatchEvent_Progress, type Node, type NodeSchema, type WatchEvent } from "../../proto/gen/curator/curator_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { storageLayout } from "../localstorage/mod.ts";
import { CuratorPool, formatEndpoint, type CuratorEndpoint } from "../curator/client/mod.ts";
import { startFakeCurator, type FakeCurator } from "../curator/fake_curator.ts";
import { checkNodeStatus } from "../curator/validate.ts";
import { rawPublicKey } from "../pki/mod.ts";
import { supervise, untilCancelled, type Runnable, type Supervisor } from "../supervisor/mod.ts";
import { eventually, tempDir, testCA, testCurator, testMembership, testNode } from "../testing/mod.ts";
import {
  ServiceBoard,
  coldStartWorker,
  kubernetesWorker,
  newRoleServerValues,
  roleFetchWorker,
  statusPushWorker,
  heartbeatWorker,
  type CuratorConnection,
  type LocalConsensus,
  type LocalCurator,
} from "./mod.ts";

const ca = testCA();
/** The node under test. */
const thisNode = testNode(ca);
const nodeId = thisNode.id;

type WatchEventInit = MessageInitShape<typeof WatchEventSchema>;

/**
 * A curator as the role server's workers see it: a fake curator whose
 * watch streams what the test pushes, and which records status updates and
 * heartbeats. It serves with a curator certificate from the cluster CA (as
 * a real consensus member would), or, as an impostor, with nothing but a
 * genuine node certificate.
 */
class WatchedCurator {
  readonly statuses: NodeStatus[] = [];
  /** The node ID of every heartbeat update received. */
  readonly heartbeats: string[] = [];
  /** Heartbeat updates are taken and never answered (a leader that stopped answering). */
  silentHeartbeats = false;
  private readonly subscribers = new Set<(event: WatchEvent | "end") => void>();
  private backlog: WatchEvent[] = [];
  private fake: FakeCurator | undefined;
  constructor(readonly serving: "curator certificate" | "node certificate" = "curator certificate") {}

  async start(): Promise<void> {
    const self = this;
    this.fake = await startFakeCurator({
      serving: this.serving === "curator certificate" ? testCurator(ca) : testNode(ca, { ipAddresses: ["127.0.0.1"] }),
      clusterCA: ca.certificate,
      curator: {
        async *watch(_request, ctx) {
          for (const event of self.backlog) yield event;
          yield { progress: WatchEvent_Progress.LAST_BACKLOGGED };
          const queue: (WatchEvent | "end")[] = [];
          let wake: (() => void) | undefined;
          const push = (e: WatchEvent | "end") => {
            queue.push(e);
            wake?.();
          };
          self.subscribers.add(push);
          ctx.signal.addEventListener("abort", () => push("end"));
          try {
            for (;;) {
              while (queue.length) {
                const next = queue.shift()!;
                if (next === "end") return;
                yield next;
              }
              await new Promise<void>((resolve) => (wake = resolve));
            }
          } finally {
            self.subscribers.delete(push);
          }
        },
        async updateNodeStatus(request) {
          self.statuses.push(request.status!);
          return {};
        },
        async *heartbeat(requests, ctx) {
          for await (const _ of requests) {
            if (ctx.peer.kind === "node") self.heartbeats.push(ctx.peer.nodeId);
            if (!self.silentHeartbeats) yield {};
          }
        },
      },
    });
  }

  get endpoint(): CuratorEndpoint {
    if (!this.fake) throw new Error("the fake curator has not started");
    return this.fake.endpoint;
  }

  /** Every call that reached it. */
  get calls(): readonly string[] {
    return this.fake?.calls ?? [];
  }

  setBacklog(events: WatchEventInit[]): void {
    this.backlog = events.map((e) => create(WatchEventSchema, e));
  }

  push(event: WatchEventInit): void {
    for (const subscriber of this.subscribers) subscriber(create(WatchEventSchema, event));
  }

  get watchers(): number {
    return this.subscribers.size;
  }

  close(): void {
    this.fake?.close();
  }
}

const node = (roles: NodeRoles, extra: { running?: boolean; address?: string; id?: string } = {}): MessageInitShape<typeof NodeSchema> => ({
  id: extra.id ?? nodeId,
  publicKey: rawPublicKey(thisNode.key.publicKey),
  roles,
  status: { externalAddress: extra.address ?? "127.0.0.1", ...(extra.running ? { runningCurator: { port: 7835 } } : {}) },
});

const fake = new WatchedCurator();
const impostor = new WatchedCurator("node certificate");
const dir = tempDir("nodecore-roleserve-");
const running: Supervisor[] = [];

beforeAll(async () => {
  await fake.start();
  await impostor.start();
});
afterAll(() => {
  fake.close();
  impostor.close();
  dir[Symbol.dispose]();
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.stop()));
  for (const pool of pools.splice(0)) pool.close();
});
const pools: CuratorPool[] = [];

function run(runnable: Runnable) {
  const { logger, entries } = captureLogger("root");
  const supervisor = supervise(
    async (ctx) => {
      ctx.run("worker", runnable);
      await untilCancelled(ctx.signal);
    },
    { logger, backoff: { initialMs: 20, multiplier: 1.5, maxMs: 200, jitter: 0 } },
  );
  running.push(supervisor);
  return { supervisor, entries };
}

function membership(): Value<ClusterMembership> {
  const value = new Value<ClusterMembership>();
  value.set(testMembership(thisNode));
  return value;
}

function connection(endpoints: CuratorEndpoint[]): Value<CuratorConnection> {
  const value = new Value<CuratorConnection>();
  const pool = new CuratorPool(thisNode.tls);
  pools.push(pool);
  value.set({ endpoints, pool });
  return value;
}

describe("role fetch worker", () => {
  test("publishes roles as they arrive, change and disappear, and the curators of the cluster", async () => {
    fake.setBacklog([{ nodes: [node(create(NodeRolesSchema, { kubernetesWorker: {} }))] }]);
    const values = newRoleServerValues();
    run(roleFetchWorker({ membership: membership(), connection: connection([fake.endpoint]), roles: values.roles, directory: values.directory }));
    await eventually(() => expect(values.roles.peek()?.kubernetesWorker).toBeDefined());
    expect(values.roles.peek()?.consensusMember).toBeUndefined();

    fake.push({ nodes: [node(create(NodeRolesSchema, { consensusMember: { address: "127.0.0.1" }, kubernetesWorker: {} }), { running: true })] });
    await eventually(() => expect(values.roles.peek()?.consensusMember).toBeDefined());
    await eventually(() => expect(values.directory.peek()?.nodes.map((n) => n.addresses[0]?.host)).toEqual(["127.0.0.1"]));

    // A node that says it runs a curator, at an address of its choosing, is
    // not one: the directory holds consensus members only, at the address
    // the cluster recorded for them.
    fake.push({ nodes: [node(create(NodeRolesSchema, {}), { id: "node-liar", running: true, address: "127.0.0.9" })] });
    fake.push({ nodes: [node(create(NodeRolesSchema, { consensusMember: { address: "127.0.0.2" } }), { id: "node-other", address: "127.0.0.3" })] });
    await eventually(() => expect(values.directory.peek()?.nodes.map((n) => n.addresses[0]?.host)).toEqual(["127.0.0.1", "127.0.0.2"]));

    fake.push({ nodeTombstones: [{ nodeId }] });
    await eventually(() => {
      const roles = values.roles.peek();
      expect(roles?.consensusMember).toBeUndefined();
      expect(roles?.kubernetesWorker).toBeUndefined();
    });
  });

  test("publishes this node's roles and the directory only when they change, not at every other node's record", async () => {
    fake.setBacklog([{ nodes: [node(create(NodeRolesSchema, { consensusMember: { address: "127.0.0.1" } }), { running: true })] }]);
    const values = newRoleServerValues();
    run(roleFetchWorker({ membership: membership(), connection: connection([fake.endpoint]), roles: values.roles, directory: values.directory }));
    await eventually(() => expect(values.roles.peek()?.consensusMember).toBeDefined());
    await eventually(() => expect(values.directory.peek()?.nodes.length).toBe(1));
    const before = { roles: values.roles._state().version, directory: values.directory._state().version };
    // Another node's record changes (its status), again and again; then this node's roles.
    for (let i = 0; i < 5; i++) fake.push({ nodes: [node(create(NodeRolesSchema, {}), { id: "node-other", address: `127.0.0.${10 + i}` })] });
    fake.push({ nodes: [node(create(NodeRolesSchema, { consensusMember: { address: "127.0.0.1" }, kubernetesWorker: {} }), { running: true })] });
    await eventually(() => expect(values.roles.peek()?.kubernetesWorker).toBeDefined());
    // Roles were published once more (the change), the directory not at all.
    expect({ roles: values.roles._state().version - before.roles, directory: values.directory._state().version - before.directory }).toEqual({ roles: 1, directory: 0 });
  });

  test("watches again through the new best curator when the curators change", async () => {
    fake.setBacklog([{ nodes: [node(create(NodeRolesSchema, {}))] }]);
    const values = newRoleServerValues();
    const conn = connection([fake.endpoint]);
    const { entries } = run(roleFetchWorker({ membership: membership(), connection: conn, roles: values.roles, directory: values.directory }));
    await eventually(() => expect(values.roles.peek()).toBeDefined());
    conn.set({ ...conn.peek()!, endpoints: [fake.endpoint, { host: "127.0.0.1", port: 1 }] });
    await eventually(() => expect(entries.some((e) => e.message === "restart requested" && e.fields.reason === "the curators changed")).toBe(true));
    await eventually(() => expect(entries.filter((e) => e.message === "watching the cluster for this node's roles").length).toBe(2));
  });
});

describe("status push worker", () => {
  test("pushes the node's status when it changes, and only then", async () => {
    fake.statuses.length = 0;
    const localCurator = new Value<LocalCurator | undefined>();
    const board = new ServiceBoard();
    run(statusPushWorker({ membership: membership(), connection: connection([fake.endpoint]), localCurator, services: board.value, bootMs: Date.now() }));
    await eventually(() => expect(fake.statuses.length).toBe(1));
    expect(fake.statuses[0]!.externalAddress).toBe("127.0.0.1");
    expect(fake.statuses[0]!.runningCurator).toBeUndefined();

    localCurator.set({ endpoint: { host: "127.0.0.1", port: 7835 } });
    await eventually(() => expect(fake.statuses.length).toBe(2));
    expect(fake.statuses[1]!.runningCurator?.port).toBe(7835);

    board.report("kubernetes", "unavailable", "no binaries");
    await eventually(() => expect(fake.statuses.length).toBe(3));
    expect(fake.statuses[2]!.services.map((s) => [s.name, s.state])).toEqual([["kubernetes", "unavailable"]]);

    // The same facts again change nothing: the next push is the next real change.
    localCurator.set({ endpoint: { host: "127.0.0.1", port: 7835 } });
    board.report("kubernetes", "unavailable", "no binaries");
    localCurator.set({ endpoint: { host: "127.0.0.1", port: 7835 } });
    board.report("kubernetes", "unavailable", "binaries removed");
    await eventually(() => expect(fake.statuses.length).toBeGreaterThanOrEqual(4));
    expect(fake.statuses.length).toBe(4);
    expect(fake.statuses[3]!.services[0]!.message).toBe("binaries removed");
  });

  test("a service's message longer than the curator takes is cut, and the status still goes out and passes the curator's check", async () => {
    fake.statuses.length = 0;
    const board = new ServiceBoard();
    board.report("supervision", "degraded", `restarting: ${"kube-apiserver (exit 1: TLS handshake timeout) ".repeat(20)}`);
    run(statusPushWorker({ membership: membership(), connection: connection([fake.endpoint]), localCurator: new Value(), services: board.value, bootMs: Date.now() }));
    await eventually(() => expect(fake.statuses.length).toBe(1));
    const pushed = fake.statuses[0]!;
    expect(() => checkNodeStatus(pushed)).not.toThrow();
    expect(pushed.services[0]!.message).toStartWith("restarting: kube-apiserver");
    expect(pushed.services[0]!.message).toEndWith("…");
  });
});

describe("heartbeat worker", () => {
  test("sends its updates on one stream, to the first curator that answers", async () => {
    fake.heartbeats.length = 0;
    // The first curator is down: the pool moves on to the fake.
    const conn = connection([{ host: "127.0.0.1", port: 1 }, fake.endpoint]);
    // The stream's answer watchdog is two intervals: at 50 ms, a 100 ms stall
    // of this loaded process would reopen the stream, and "opened once" would
    // test the machine's load.
    const { entries } = run(heartbeatWorker({ membership: membership(), connection: conn, intervalMs: 1_000 }));
    await eventually(() => expect(fake.heartbeats.length).toBeGreaterThanOrEqual(3), { timeoutMs: 20_000 });
    expect(new Set(fake.heartbeats)).toEqual(new Set([nodeId]));
    // One stream carried them all: it was opened once.
    expect(entries.filter((e) => e.message === "heartbeat stream open").length).toBe(1);
  }, 30_000);

  test("a leader that takes the updates and never answers: the stream is given up after two intervals and opened again", async () => {
    const silent = new WatchedCurator();
    await silent.start();
    silent.silentHeartbeats = true;
    try {
      const { entries } = run(heartbeatWorker({ membership: membership(), connection: connection([silent.endpoint]), intervalMs: 300 }));
      await eventually(() => expect(entries.filter((e) => String(e.fields.reason ?? "").startsWith("no heartbeat answer within 600 ms")).length).toBeGreaterThanOrEqual(1), { timeoutMs: 15_000 });
      // It keeps trying: updates reach the silent leader on a new stream after the first gave up.
      const before = silent.heartbeats.length;
      await eventually(() => expect(silent.heartbeats.length).toBeGreaterThan(before), { timeoutMs: 15_000 });
      expect(entries.some((e) => e.message === "heartbeat stream open")).toBe(false);
    } finally {
      silent.close();
    }
  }, 30_000);

  test("an impostor curator never receives a heartbeat", async () => {
    impostor.heartbeats.length = 0;
    const { entries } = run(heartbeatWorker({ membership: membership(), connection: connection([impostor.endpoint]), intervalMs: 50 }));
    await eventually(() => expect(entries.some((e) => String(e.fields.reason ?? "").includes("not a curator certificate"))).toBe(true));
    expect(impostor.heartbeats).toEqual([]);
    expect(impostor.calls).toEqual([]);
  });
});

describe("an impostor curator", () => {
  test("holding only a genuine node certificate, it gets neither the node's status nor its watch", async () => {
    impostor.statuses.length = 0;
    impostor.setBacklog([{ nodes: [node(create(NodeRolesSchema, { consensusMember: { address: "127.0.0.1" } }))] }]);
    const values = newRoleServerValues();
    const { entries } = run(roleFetchWorker({ membership: membership(), connection: connection([impostor.endpoint]), roles: values.roles, directory: values.directory }));
    const board = new ServiceBoard();
    const push = run(statusPushWorker({ membership: membership(), connection: connection([impostor.endpoint]), localCurator: new Value(), services: board.value, bootMs: Date.now() }));
    const refused = (e: { message: string; fields: Record<string, unknown> }) => String(e.fields.error ?? "").includes("not a curator certificate");
    await eventually(() => expect(entries.some(refused)).toBe(true));
    await eventually(() => expect(push.entries.some(refused)).toBe(true));
    expect(values.roles.peek()).toBeUndefined();
    expect(impostor.statuses).toEqual([]);
    expect(impostor.watchers).toBe(0);
    expect(impostor.calls).toEqual([]);
  });
});

describe("cold-start worker", () => {
  test("a new consensus member makes no shares until its own etcd member serves, then asks a curator for its join certificate", async () => {
    using dir = tempDir("nodecore-coldstart-worker-");
    const roles = new Value<NodeRoles | undefined>();
    const directory = new Value<ClusterDirectory>();
    const localConsensus = new Value<object | undefined>();
    const board = new ServiceBoard();
    const line = () => board.value.peek()?.find((s) => s.name === "coldstart");
    // No curator at all: once it may go on, the worker says it waits for one.
    run(coldStartWorker({ layout: storageLayout(dir.path), membership: membership(), roles, directory, connection: connection([]), board, sealed: new Value(), localConsensus }));
    roles.set(create(NodeRolesSchema, { consensusMember: {} }));
    directory.set(create(ClusterDirectorySchema));
    await eventually(() => expect(line()?.message).toBe("waiting for this node's etcd member to serve before making shares"));
    localConsensus.set({});
    await eventually(() => expect(line()?.message).toStartWith("waiting for a curator to issue the join certificate: "));
  });
});

describe("curator connection", () => {
  test("switches from remote curators to the local one when the control plane runs, and back", async () => {
    // The connection worker is internal; observe it through a role server.
    // Every address here is on loopback: nothing is dialled beyond this host.
    const { roleServer } = await import("./mod.ts");
    const values = newRoleServerValues();
    const member = membership();
    member.set({
      ...member.peek()!,
      directory: create(ClusterDirectorySchema, { nodes: [{ addresses: [{ host: "127.0.0.2" }] }, { addresses: [{ host: "127.0.0.1" }] }] }),
    });
    const layout = storageLayout(join(dir.path, "conn"));
    const { supervisor } = run(roleServer({ layout, membership: member, etcdClientHost: () => "127.0.0.1", kubernetesBinDir: join(dir.path, "none") }, values));
    // Not a consensus member: only remote curators (never this node's own address).
    const endpoints = () => values.connection.peek()?.endpoints.map(formatEndpoint);
    await eventually(() => expect(endpoints()).toEqual(["127.0.0.2:7835"]));
    values.localCurator.set({ endpoint: { host: "127.0.0.1", port: 7835, nodeId } });
    await eventually(() => expect(endpoints()).toEqual([`${nodeId}@127.0.0.1:7835`, "127.0.0.2:7835"]));
    values.localCurator.set(undefined);
    await eventually(() => expect(endpoints()).toEqual(["127.0.0.2:7835"]));
    await supervisor.stop();
  });
});

describe("kubernetes worker", () => {
  const line = (board: ServiceBoard, name: string) => board.value.peek()?.find((s) => s.name === name);
  /** What the worker reads besides roles: no membership or etcd member (none of these tests gets as far as launching a controller). */
  const unused = () => ({
    membership: new Value<ClusterMembership>(),
    localConsensus: new Value<LocalConsensus | undefined>(),
    ephemeralDir: join(dir.path, "ephemeral-kubernetes"),
    dataDir: join(dir.path, "data-kubernetes"),
    connection: new Value<CuratorConnection>(),
    nodes: new Value<readonly Node[]>(),
  });

  test("says plainly when the Kubernetes binaries are missing, and re-checks when roles change", async () => {
    const binDir = join(dir.path, "k8s");
    const roles = new Value<NodeRoles | undefined>();
    const board = new ServiceBoard();
    const { entries } = run(kubernetesWorker({ ...unused(), roles, board, binDir }));
    roles.set(create(NodeRolesSchema, {}));
    await eventually(() => expect(line(board, "kubernetes")?.state).toBe("not-assigned"));
    roles.set(create(NodeRolesSchema, { kubernetesWorker: {} }));
    await eventually(() => expect(line(board, "kubernetes")?.state).toBe("unavailable"));
    expect(line(board, "kubernetes")!.message).toContain(`Kubernetes binaries not found in ${binDir} (missing: kubelet, kube-proxy)`);
    // No runtime given: this node cannot run containers, and says so (the worker part says it after the decision: wait for it).
    await eventually(() => expect(line(board, "containerd")).toMatchObject({ state: "unavailable", message: "this node cannot run containers: no cgroup v2 hierarchy is mounted" }));
    mkdirSync(binDir, { recursive: true });
    writeFileSync(join(binDir, "kubelet"), "#!/bin/sh\n");
    roles.set(create(NodeRolesSchema, { kubernetesWorker: {}, kubernetesController: {} }));
    await eventually(() => expect(line(board, "kubernetes")!.message).toContain("missing: kube-apiserver, kube-controller-manager, kube-scheduler"));
    expect(entries.some((e) => e.message === "restart requested" && e.fields.reason === "Kubernetes roles changed")).toBe(true);
  });

  test("the runtime: a missing system image is named; without the role, leftovers in its cgroup are killed and the node says none is left, and its registry logins are gone", async () => {
    const cgroupRoot = unifiedCgroupRoot();
    if (!cgroupRoot) throw new Error("no cgroup v2 hierarchy on this host");
    const paths = runtimePaths(join(dir.path, "data"), join(dir.path, "run"), cgroupRoot, `nodecore-test-kw-${process.pid}`);
    const roles = new Value<NodeRoles | undefined>();
    const board = new ServiceBoard();
    const prepare = () => {
      throw new Error("the system image is not attached: no drive with serial nodecore-system");
    };
    run(
      kubernetesWorker({ ...unused(), roles, board, binDir: join(dir.path, "k8s"), prepare, runtime: { paths, probeImage: join(dir.path, "probe.tar"), sandboxImage: join(dir.path, "pause.tar") } }),
    );
    roles.set(create(NodeRolesSchema, { kubernetesWorker: {} }));
    await eventually(() => expect(line(board, "containerd")?.state).toBe("unavailable"));
    expect(line(board, "containerd")!.message).toBe("container runtime files missing: the system image is not attached: no drive with serial nodecore-system");

    // What the worker wrote of the cluster's registry configuration, its logins included.
    const credentials = join(dir.path, "ephemeral-kubernetes", "kubelet", "registry-credentials.json");
    mkdirSync(join(dir.path, "ephemeral-kubernetes", "kubelet"), { recursive: true });
    writeFileSync(credentials, '{"hosts":{"registry.example.com":{"username":"u","password":"p"}}}');
    mkdirSync(join(paths.registryHosts, "registry.example.com"), { recursive: true });
    writeFileSync(join(paths.registryHosts, "registry.example.com", "hosts.toml"), "");
    // A process an earlier run left in the runtime's cgroup (a shim, say).
    const leftover = Bun.spawn(["sleep", "300"]);
    try {
      joinCgroup(join(paths.cgroup, "containerd"), leftover.pid);
      roles.set(create(NodeRolesSchema, {}));
      await eventually(() => expect(line(board, "containerd")?.state).toBe("not-assigned"));
      expect(line(board, "containerd")!.message).toBe(`no kubernetes-worker role; no container process left (${paths.cgroup} is empty)`);
      expect(await leftover.exited).toBe(137);
      expect(existsSync(paths.cgroup)).toBe(false);
      // The logins end with the role.
      expect(existsSync(credentials)).toBe(false);
      expect(existsSync(paths.registryHosts)).toBe(false);
    } finally {
      leftover.kill("SIGKILL");
    }
  });
});
