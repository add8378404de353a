// ctl cluster health on three node processes, as an operator or a script
// uses it: one verdict, its exit code (0 healthy, 1 degraded, 2
// unreachable), the failing check named with its reason, and --wait.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { ctl as runCtl } from "./support/node_process.ts";
import { etcdClientOf, formProcessCluster, type ProcessCluster } from "./support/process_cluster.ts";

const dir = tempDir("nodecore-health-");
let cluster: ProcessCluster;

// A backup target that is always full.
const full = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("", { status: 507, statusText: "Insufficient Storage" }) });

beforeAll(async () => {
  cluster = await formProcessCluster(dir.path, 90);
}, 240_000);
afterAll(async () => {
  full.stop(true);
  await cluster?.stop();
  dir[Symbol.dispose]();
}, 60_000);

const health = (...args: string[]) => runCtl(cluster.ctlDir, "--owner-key", cluster.ownerKeyFile, "cluster", "health", ...args);
type Verdict = { verdict: string; reason?: string; checks: { name: string; ok: boolean; detail: string }[] };
const failed = (v: Verdict) => Object.fromEntries(v.checks.filter((c) => !c.ok).map((c) => [c.name, c.detail]));

describe("ctl cluster health", () => {
  test("a formed cluster is healthy once it settles: exit 0, every check named with what it found", async () => {
    const result = await health("--wait", "--wait-timeout", "90");
    expect(result.stderr.replace(/\r\x1b\[2K[^\n]*/g, "")).toBe("");
    expect(result.code).toBe(0);
    const lines = result.stdout.trim().split("\n");
    expect(lines.at(-1)).toBe("cluster: healthy");
    expect(lines[0]).toMatch(/^nodes +ok +3 UP, every one heard from and none failing$/);
    expect(lines).toContainEqual(expect.stringMatching(/^consensus +ok +3 voting members, one for each consensus node, no learner$/));
    expect(lines).toContainEqual(expect.stringMatching(/^clocks +ok +3 known, the furthest \d+ ms (ahead of|behind) the curator leader's \(node-[0-9a-f]+\)$/));
    const [leader] = lines.filter((l) => l.startsWith("curator")).map((l) => /(node-[0-9a-f]+) leads/.exec(l)?.[1]);
    expect([...cluster.ids.values()]).toContain(leader!);
  }, 120_000);

  test("a backup target that is full makes it degraded (exit 1), naming the backups and why; turned off, backups are not judged", async () => {
    const id = cluster.ids.get(cluster.nodes[0]!)!;
    await cluster.ctl("cluster", "schedule-backups", "--every", "60", "--node", id, "--upload", `http://127.0.0.1:${full.port}/b/`);
    const verdict = await eventually(
      async () => {
        const result = await health("--json");
        const v = JSON.parse(result.stdout) as Verdict;
        if (!failed(v).backups?.startsWith("the last attempt failed")) throw new Error(`no failed attempt yet: ${result.stdout}`);
        expect(result.code).toBe(1);
        return v;
      },
      { timeoutMs: 90_000, intervalMs: 1_000, what: "the backups check failing" },
    );
    expect(verdict.verdict).toBe("degraded");
    expect(failed(verdict).backups).toMatch(/^the last attempt failed: the backup target http:\/\/127\.0\.0\.1:\d+\/b\/\S+ answered HTTP 507 Insufficient Storage \(the target is full\)$/);
    // The node that takes them is DEGRADED too, by its backups line: the failure shows wherever health shows.
    expect(failed(verdict).nodes ?? `${id} is DEGRADED (backups: `).toStartWith(`${id} is DEGRADED (backups: `);
    await cluster.ctl("cluster", "schedule-backups", "--every", "0");
    const off = JSON.parse((await health("--json")).stdout) as Verdict;
    expect(off.checks.find((c) => c.name === "backups")).toEqual({ name: "backups", ok: true, detail: "none scheduled (not judged)" });
    // The node withdraws its backups line at its next look at the schedule.
    expect((await health("--wait", "--wait-timeout", "60")).code).toBe(0);
  }, 120_000);

  test("a node that stops is named with its heartbeat timeout; --wait returns 0 once it is back", async () => {
    const node3 = cluster.nodes[2]!;
    const id3 = cluster.ids.get(node3)!;
    await node3.stop("SIGKILL");
    const verdict = await eventually(
      async () => {
        const result = await health("--json");
        const v = JSON.parse(result.stdout) as Verdict;
        if (!failed(v).nodes) throw new Error(`nodes not failing yet: ${result.stdout}`);
        expect(result.code).toBe(1);
        return v;
      },
      { timeoutMs: 60_000, intervalMs: 1_000, what: "node3 named by the nodes check" },
    );
    expect(failed(verdict).nodes).toMatch(new RegExp(`^${id3} is HEARTBEAT_TIMEOUT \\(last heard \\d+s ago\\)$|^${id3} is HEARTBEAT_TIMEOUT$`));
    const text = (await health()).stdout.trim().split("\n");
    expect(text.at(-1)).toMatch(/^cluster: degraded \(nodes(, [a-z]+)*\)$/);

    node3.start();
    const back = await health("--wait", "--wait-timeout", "90");
    expect(back.code).toBe(0);
    expect(back.stdout.trim().split("\n").at(-1)).toBe("cluster: healthy");
  }, 180_000);

  test("an etcd learner no consensus role accounts for fails the consensus check until the leader removes it", async () => {
    // What a role change interrupted halfway leaves: a learner that never starts.
    const client = await etcdClientOf(cluster.nodes[0]!);
    try {
      // etcd refuses reconfiguration for a while after a member (re)started ("unhealthy cluster").
      await eventually(() => client.cluster.memberAdd({ peerURLs: ["https://127.0.0.250:2380"], isLearner: true }), { timeoutMs: 30_000, intervalMs: 1_000, what: "a learner added" });
    } finally {
      client.close();
    }
    const degraded = JSON.parse((await health("--json")).stdout) as Verdict;
    expect(failed(degraded).consensus).toMatch(/^member [0-9a-f]+ is still a learner$/);
    // The curator leader's membership reconciler removes it (after its grace), and the verdict follows.
    const back = await health("--wait", "--wait-timeout", "120");
    expect(back.code).toBe(0);
  }, 180_000);

  test("node list --filter and node describe: the operator's other views of the same nodes", async () => {
    const list = (args: string[]) => cluster.ctl("node", "list", "--json", ...args).then((r) => JSON.parse(r.stdout) as { id: string }[]);
    expect((await list(["--filter", "role=consensus,state=UP"])).length).toBe(3);
    expect((await list(["--filter", "health=heartbeat_timeout"])).length).toBe(0);
    const bad = await runCtl(cluster.ctlDir, "--owner-key", cluster.ownerKeyFile, "node", "list", "--filter", "a b=c");
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split("\n")).toHaveLength(1);
    expect(bad.stderr).toStartWith('ctl: --filter: "a b=c" is no filter term');
    const id = cluster.ids.get(cluster.nodes[0]!)!;
    const described = (await cluster.ctl("node", "describe", id)).stdout;
    expect(described).toMatch(/^Version: +\S+/m);
    expect(described).toMatch(/^Clock: +(within 1s of|\S+ (ahead of|behind)) the curator leader's/m);
    expect(described).toMatch(/^Booted: +\d{4}-\d\d-\d\dT\S+Z \(up \S+\)$/m);
  }, 60_000);

  test("with every node down no curator answers: exit 2, unreachable, with why", async () => {
    await cluster.stop();
    const result = await health("--timeout", "2000");
    expect(result.code).toBe(2);
    expect(result.stdout.trim()).toMatch(/^cluster: unreachable \(.+\)$/);
    expect(result.stdout.trim().split("\n")).toHaveLength(1);
  }, 60_000);
});
