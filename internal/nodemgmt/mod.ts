// Package nodemgmt: the node management service every node serves, so the
// owner can look into a node and act on it without touching its host.
//
//   ctl node logs|services|reboot|poweroff <id>
//        │ 1. Management.GetNodes (any curator) ──▶ the node's reported address
//        │ 2. mutual TLS to <address>:7836: the owner's certificate; the node
//        │    must present the node certificate for <id> (client/: the owner's side)
//        ▼
//   NodeManagement (server.ts, under root.nodemgmt once the node is a member)
//        ├── GetLogs     ◀── internal/logtree (a ring per runnable, process output, kernel)
//        ├── GetServices ◀── the supervisor's dump (state, restarts, last error, since)
//        ├── Reboot, PowerOff ──▶ PID 1's power path, the one the ACPI button takes
//        └── Update, Rollback ──▶ internal/update: the slot this node does not
//            run; the owner sends only what the booted slot lacks, through
//            a receive window opened for it (UPDATE_RECEIVE_WINDOW_BYTES)
//
// Invariants:
//  - Owner only: every method's policy is "owner" (service.ts); a node
//    certificate gets nothing here.
//  - Every request field is validated; log followers and backlogs are bounded.
//  - A power request is answered before it is carried out.

export { nodeManagementRunnable, type NodeManagementOptions } from "./server.ts";
export { nodeManagementService, NODE_MANAGEMENT_POLICY, MAX_FOLLOWERS, MAX_BACKLOG, POWER_DELAY_MS, UPDATE_RECEIVE_WINDOW_BYTES, type NodeManagementDeps, type PowerRequest } from "./service.ts";
