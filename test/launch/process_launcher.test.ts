// `bun run cluster --processes`: node processes of the built out/init on
// loopback form a cluster as the owner would, and the ctl wrapper the
// launcher writes reaches it; a storm of 60 registrations loses none of the
// owner's calls (issue 46).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { createLogger } from "../../internal/log/mod.ts";
import { REPO_ROOT } from "../../image/mod.ts";
import { launchProcessCluster, processAddress, type ProcessCluster } from "./process_launcher.ts";

let cluster: ProcessCluster | undefined;

beforeAll(() => {
  const result = Bun.spawnSync([process.execPath, "run", "build"], { cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`bun run build failed:\n${result.stderr}`);
}, 300_000);

afterAll(async () => {
  await cluster?.close();
});

describe("node processes launched as a cluster", () => {
  test("four processes: all UP, three voting members, and the ctl wrapper lists them as the owner", async () => {
    const launched = await launchProcessCluster({ name: "launcher-test", nodes: 4, consensus: 3, timeoutMs: 90_000, logger: createLogger("test.launch", { format: "none" }) });
    cluster = launched.cluster;
    expect(new Set(cluster.ids.values()).size).toBe(4);
    expect(cluster.nodes.map((n) => n.address)).toEqual([1, 2, 3, 4].map((i) => processAddress("launcher-test", i)));
    expect(launched.figures.formed).toBeGreaterThanOrEqual(launched.figures.allUp);

    const listed = Bun.spawnSync([join(cluster.dir.path, "ctl"), "node", "list", "--json"], { stdout: "pipe", stderr: "pipe" });
    expect(listed.stderr.toString()).toBe("");
    const nodes = JSON.parse(listed.stdout.toString()) as { id: string; state: string; roles: string[]; services: { name: string; state: string }[] }[];
    expect(nodes.map((n) => n.id).sort()).toEqual([...cluster.ids.values()].sort());
    expect(nodes.every((n) => n.state === "UP")).toBe(true);
    expect(nodes.filter((n) => n.services.some((s) => s.name === "consensus" && s.state === "voter"))).toHaveLength(3);

    await cluster.close();
    expect(cluster.nodes.some((n) => n.running)).toBe(false);
    cluster = undefined;
  }, 180_000);

  test("a storm of 60 registrations (a batch of 50, then 10): all UP, three voters, and every one of the owner's calls reached a curator", async () => {
    const launched = await launchProcessCluster({ name: "storm-test", nodes: 61, consensus: 3, timeoutMs: 180_000, logger: createLogger("test.storm", { format: "none" }) });
    cluster = launched.cluster;
    expect(new Set(cluster.ids.values()).size).toBe(61);
    expect(launched.figures.ownerCalls).toBeGreaterThan(60);
    console.log(
      `storm of 60: all UP ${(launched.figures.allUp / 1000).toFixed(1)} s, formed ${(launched.figures.formed / 1000).toFixed(1)} s, ${launched.figures.ownerCalls} owner calls, ${launched.figures.ownerCallFailures} reached no curator`,
    );
    // Why node1's servers dropped connections, from its own metric: what to
    // look at first when an owner call was lost.
    const metrics = Bun.spawnSync([join(cluster.dir.path, "ctl"), "metrics", "show", cluster.ids.get("node1")!], { stdout: "pipe", stderr: "pipe" });
    const drops = metrics.stdout
      .toString()
      .split("\n")
      .filter((l) => l.includes("rpc_connections_dropped_total{"));
    console.log(`node1's dropped connections: ${drops.join("; ") || "none"}${metrics.exitCode === 0 ? "" : ` (ctl metrics show: ${metrics.stderr.toString().trim()})`}`);
    expect({ failures: launched.figures.ownerCallFailures, reasons: launched.figures.ownerCallFailureReasons }).toEqual({ failures: 0, reasons: [] });
    await cluster.close();
    cluster = undefined;
  }, 420_000);

  test("addresses differ between cluster names, and stay in 127.77.0.0/16", () => {
    expect(processAddress("dev", 1)).not.toBe(processAddress("other", 1));
    expect(processAddress("dev", 1)).toMatch(/^127\.77\.\d{1,3}\.11$/);
  });
});
