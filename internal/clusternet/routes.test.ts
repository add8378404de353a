// The mesh's routes and rule on the real kernel, in a network namespace the
// test makes (routes_driver.ts does the work inside it).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

const NAMESPACE = `nodecore-mesh-${process.pid}`;

describe("mesh routes", () => {
  beforeAll(() => {
    const made = Bun.spawnSync(["ip", "netns", "add", NAMESPACE]);
    if (made.exitCode !== 0) throw new Error(`ip netns add: ${made.stderr.toString()}`);
  });
  afterAll(() => {
    Bun.spawnSync(["ip", "netns", "del", NAMESPACE]);
  });

  test("pods reach peers' pods and peers' addresses through the mesh, the node's own packets to a peer's address do not, and the routes converge to the peers", () => {
    const run = Bun.spawnSync(["ip", "netns", "exec", NAMESPACE, process.execPath, join(import.meta.dir, "routes_driver.ts")]);
    expect(run.stderr.toString()).toBe("");
    const seen = JSON.parse(run.stdout.toString());
    expect(seen.first).toEqual({
      added: ["10.244.13.0/24", "10.244.14.0/24", "10.77.0.13/32 (table 199)", "10.77.0.14/32 (table 199)", "rule from 10.244.12.0/24"],
      removed: [],
    });
    // Applying the same peers again changes nothing.
    expect(seen.again).toEqual({ added: [], removed: [] });
    expect(seen.routing).toEqual({
      podToPeerPods: "nodecore-wg",
      podToPeerAddress: "nodecore-wg",
      // WireGuard's own UDP to the peer, and everything else the node sends, keeps the plain route.
      nodeToPeerAddress: "nic-standin",
      podToOtherHost: "nic-standin",
    });
    expect(seen.healed).toEqual({ added: ["10.244.13.0/24"], removed: ["10.244.14.0/24", "10.77.0.14/32 (table 199)"] });
    expect(seen.left).toEqual({ main: ["10.244.13.0/24"], mesh: ["10.77.0.13/32"], rules: [{ from: "10.244.12.0/24", table: 199, priority: 1000 }] });
    expect(seen.moved).toEqual({ added: ["rule from 10.244.40.0/24"], removed: ["rule from 10.244.12.0/24"] });
    expect(seen.rulesMoved).toEqual([{ from: "10.244.40.0/24", table: 199, priority: 1000 }]);
    expect(seen.gone).toBe(true);
    expect(seen.rulesAfter).toEqual([]);
    expect(seen.link).toBeNull();
  });
});
