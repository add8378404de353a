// Test driver, run by rtnetlink.test.ts inside a network namespace of its
// own: makes a link, routes through it and reads the routes back, all over
// netlink, and prints what it saw as one JSON line.

import { createLink, deleteLink, deleteRoute, linkIndex, ourRoutes, replaceRoute } from "./rtnetlink.ts";
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
let refused = "";
try {
  createLink("nc-test1", "no-such-kind");
} catch (err) {
  refused = err instanceof NetlinkError ? err.message : `not a NetlinkError: ${String(err)}`;
}
const deleted = [deleteLink("nc-test0"), deleteLink("nc-test0"), linkIndex("nc-test0") ?? null];
process.stdout.write(JSON.stringify({ created, again, index, missing: linkIndex("nc-none") ?? null, routes, after, refused, deleted }) + "\n");
