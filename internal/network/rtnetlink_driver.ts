// Test driver, run by rtnetlink.test.ts inside a network namespace of its
// own: makes a link, routes through it and reads the routes back, all over
// netlink, routes in a table of its own and a source rule to it, and prints what it saw as one JSON line.

import { addRule, createLink, deleteLink, deleteRoute, deleteRule, linkIndex, ourRoutes, ourRules, replaceRoute } from "./rtnetlink.ts";
import { setLinkUp } from "./interface_config.ts";
import { NetlinkError } from "./netlink.ts";

const created = createLink("nc-test0", "bridge");
const again = createLink("nc-test0", "bridge");
const index = linkIndex("nc-test0")!;
setLinkUp("nc-test0");
replaceRoute({ prefix: "10.244.7.0/24", ifindex: index });
replaceRoute({ prefix: "10.244.7.0/24", ifindex: index });
replaceRoute({ prefix: "10.244.9.0/24", ifindex: index });
const routes = ourRoutes(index).map((r) => r.prefix);
deleteRoute({ prefix: "10.244.7.0/24", ifindex: index });
deleteRoute({ prefix: "10.244.7.0/24", ifindex: index });
const after = ourRoutes(index).map((r) => r.prefix);
// A second table: its routes are listed apart from the main table's.
replaceRoute({ prefix: "10.77.0.13/32", ifindex: index, table: 199 });
const tabled = { main: ourRoutes(index).map((r) => r.prefix), other: ourRoutes(index, 199).map((r) => `${r.prefix} table ${r.table}`) };
const rule = { from: "10.244.9.0/24", table: 199, priority: 1000 };
const ruleAdded = [addRule(rule), addRule(rule)];
const rules = ourRules();
deleteRule(rule);
deleteRule(rule);
const rulesAfter = ourRules();
let refused = "";
try {
  createLink("nc-test1", "no-such-kind");
} catch (err) {
  refused = err instanceof NetlinkError ? err.message : `not a NetlinkError: ${String(err)}`;
}
const deleted = [deleteLink("nc-test0"), deleteLink("nc-test0"), linkIndex("nc-test0") ?? null];
process.stdout.write(JSON.stringify({ created, again, index, missing: linkIndex("nc-none") ?? null, routes, after, tabled, ruleAdded, rules, rulesAfter, refused, deleted }) + "\n");
