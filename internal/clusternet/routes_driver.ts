// Test driver, run by routes.test.ts inside a network namespace of its own:
// a bridge named INTERFACE_NAME stands in for the WireGuard device (this
// host's kernel has no WireGuard; routing does not care about the kind),
// and a second bridge for the node's NIC on 10.77.0.0/24. Prints one JSON
// line of what applyRoutes did and where the kernel then routes.

import { applyRoutes, INTERFACE_NAME, leaveMesh } from "./service.ts";
import { createLink, deleteRoute, linkIndex, ourRoutes, ourRules, setAddress, setLinkUp } from "../network/mod.ts";
import type { Peer } from "./peers.ts";

const peer = (n: number): Peer => ({
  nodeId: `node-${n}`,
  publicKey: Buffer.alloc(32, n).toString("base64"),
  endpoint: `10.77.0.${n}:51820`,
  allowedIps: [`10.244.${n}.0/24`, `10.77.0.${n}/32`],
  podPrefix: `10.244.${n}.0/24`,
});

/** Which device the kernel picks for `to`, from `from` if given. */
function deviceFor(to: string, from?: string): string {
  const run = Bun.spawnSync(["ip", "-j", "route", "get", to, ...(from ? ["from", from] : [])]);
  return run.exitCode === 0 ? JSON.parse(run.stdout.toString())[0].dev : `error: ${run.stderr.toString().trim()}`;
}

createLink("nic-standin", "bridge");
setAddress("nic-standin", "10.77.0.12", 24);
setLinkUp("nic-standin");
createLink(INTERFACE_NAME, "bridge");
setAddress(INTERFACE_NAME, "10.244.12.1", 32);
setLinkUp(INTERFACE_NAME);
const ifindex = linkIndex(INTERFACE_NAME)!;

const first = applyRoutes(ifindex, "10.244.12.0/24", [peer(13), peer(14)]);
const again = applyRoutes(ifindex, "10.244.12.0/24", [peer(13), peer(14)]);
const routing = {
  podToPeerPods: deviceFor("10.244.13.5", "10.244.12.1"),
  podToPeerAddress: deviceFor("10.77.0.13", "10.244.12.1"),
  nodeToPeerAddress: deviceFor("10.77.0.13"),
  podToOtherHost: deviceFor("10.77.0.1", "10.244.12.1"),
};
// A route someone removed by hand comes back; a peer that left takes its routes along.
deleteRoute({ prefix: "10.244.13.0/24", ifindex });
const healed = applyRoutes(ifindex, "10.244.12.0/24", [peer(13)]);
const left = { main: ourRoutes(ifindex).map((r) => r.prefix), mesh: ourRoutes(ifindex, 199).map((r) => r.prefix), rules: ourRules() };
// A new prefix (the curator's records changed) replaces the rule.
const moved = applyRoutes(ifindex, "10.244.40.0/24", [peer(13)]);
const rulesMoved = ourRules();
const gone = await leaveMesh();
process.stdout.write(JSON.stringify({ first, again, routing, healed, left, moved, rulesMoved, gone, rulesAfter: ourRules(), link: linkIndex(INTERFACE_NAME) ?? null }) + "\n");
