// Package nodemgmt/client: the owner's side of node management (ctl,
// internal/operator), apart from the server that every node runs, so that
// the owner's side never stands on the node's role server.
//
//   dialNodeManagement(address, node ID, owner TLS) ──▶ NodeManagement client
//        the node must present the node certificate for that ID (dial.ts)
//   WIRE_LEVELS, levelOfWire: log levels between internal/log and the wire
//        (levels.ts), for the server and for ctl
//
// The server (internal/nodemgmt) imports this package for its port and the
// levels; nothing here imports the server.

export { dialNodeManagement, NODE_MANAGEMENT_PORT, type OwnerTls } from "./dial.ts";
export { WIRE_LEVELS, levelOfWire } from "./levels.ts";
