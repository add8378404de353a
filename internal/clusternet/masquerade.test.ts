// The pods' masquerade on the real kernel: three network namespaces the
// test makes stand for a pod, its node and a host outside the mesh that has
// no route to the pods. The pod's connection to that host is answered only
// when the node masquerades it, and the host sees the node's address.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { masqueradeRuleset } from "./masquerade.ts";

const tag = process.pid;
const NS = { pod: `nc-pod-${tag}`, node: `nc-node-${tag}`, outside: `nc-out-${tag}` };
const DRIVER = join(import.meta.dir, "masquerade_driver.ts");

function sh(argv: string[]): string {
  const run = Bun.spawnSync(argv);
  if (run.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${run.stderr.toString().trim()}`);
  return run.stdout.toString();
}
const inside = (ns: string, argv: string[]) => sh(["ip", "netns", "exec", ns, ...argv]);
const driver = (ns: string, ...args: string[]) => inside(ns, [process.execPath, DRIVER, ...args]).trim();

describe("the pods' masquerade", () => {
  let server: { kill(): void } | undefined;
  beforeAll(async () => {
    for (const ns of Object.values(NS)) sh(["ip", "netns", "add", ns]);
    // pod (10.244.12.5) ── node (10.244.12.1 | 10.77.0.12) ── outside (10.77.0.1, no route to 10.244.0.0/16)
    sh(["ip", "link", "add", "nc-pod", "netns", NS.pod, "type", "veth", "peer", "name", "nc-pod-br", "netns", NS.node]);
    sh(["ip", "link", "add", "nc-lan", "netns", NS.outside, "type", "veth", "peer", "name", "nc-eth", "netns", NS.node]);
    inside(NS.pod, ["ip", "addr", "add", "10.244.12.5/24", "dev", "nc-pod"]);
    inside(NS.pod, ["ip", "link", "set", "nc-pod", "up"]);
    inside(NS.pod, ["ip", "route", "add", "default", "via", "10.244.12.1"]);
    inside(NS.node, ["ip", "addr", "add", "10.244.12.1/24", "dev", "nc-pod-br"]);
    inside(NS.node, ["ip", "addr", "add", "10.77.0.12/24", "dev", "nc-eth"]);
    inside(NS.node, ["ip", "link", "set", "nc-pod-br", "up"]);
    inside(NS.node, ["ip", "link", "set", "nc-eth", "up"]);
    inside(NS.node, ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
    inside(NS.outside, ["ip", "addr", "add", "10.77.0.1/24", "dev", "nc-lan"]);
    inside(NS.outside, ["ip", "link", "set", "nc-lan", "up"]);
    const serving = Bun.spawn(["ip", "netns", "exec", NS.outside, process.execPath, DRIVER, "serve", "10.77.0.1", "8099"], { stdout: "pipe", stderr: "inherit" });
    server = serving;
    const reader = serving.stdout.getReader();
    let said = "";
    while (!said.includes("listening")) {
      const chunk = await reader.read();
      if (chunk.done) throw new Error("the stand-in outside host did not listen");
      said += new TextDecoder().decode(chunk.value);
    }
  });
  afterAll(() => {
    server?.kill();
    for (const ns of Object.values(NS)) Bun.spawnSync(["ip", "netns", "del", ns]);
  });

  test("the ruleset masquerades the pod prefix's packets to outside the cluster CIDR, except into the mesh, and replaces the table whole", () => {
    const ruleset = masqueradeRuleset("10.244.12.0/24", "nodecore-wg", "10.244.0.0/16");
    expect(ruleset).toContain('ip saddr 10.244.12.0/24 ip daddr != 10.244.0.0/16 oifname != "nodecore-wg" masquerade');
    expect(ruleset.indexOf("delete table ip nodecore_clusternet")).toBeLessThan(ruleset.indexOf("nodecore_clusternet {"));
  });

  test("without the table the outside host cannot answer the pod; with it, it answers the node's address; applied twice it is one table; removed, the pod is cut off again", () => {
    expect(driver(NS.pod, "dial", "10.77.0.1", "8099")).toBe("no answer");
    driver(NS.node, "apply", "10.244.12.0/24");
    driver(NS.node, "apply", "10.244.12.0/24");
    expect(driver(NS.pod, "dial", "10.77.0.1", "8099")).toBe("10.77.0.12");
    const tables = inside(NS.node, ["nft", "list", "tables"]);
    expect(tables.trim().split("\n")).toEqual(["table ip nodecore_clusternet"]);
    driver(NS.node, "remove");
    driver(NS.node, "remove");
    expect(inside(NS.node, ["nft", "list", "tables"]).trim()).toBe("");
    expect(driver(NS.pod, "dial", "10.77.0.1", "8099")).toBe("no answer");
  }, 30_000);
});
