// Package launch: boots a cluster of nodes under qemu on this host, for
// people (`bun run cluster`), the e2e test and the benchmarks.
//
// A cluster gets its own network namespace: a bridge with one tap per node,
// and dnsmasq handing node i the address 10.77.<subnet>.(10+i) by its MAC.
// Nothing in the namespace is connected to the host's network, so guests
// reach each other, dnsmasq, and host commands run inside the namespace
// (Cluster.exec: a later out/ctl talks to the nodes that way) — nothing else.
// Each node is a qemu process started inside the namespace with its own copy
// of the disk template, its parameters in fw_cfg, a QMP socket to press its
// power button, and its serial console captured line by line.
//
//   host                          ┌─── network namespace nodecore-<name> ──────────────────┐
//   ────                          │                                                        │
//   createCluster()               │   br0 10.77.<n>.1/24 ◀── dnsmasq (DHCP, static leases) │
//     ├─ out/cluster/<name>/      │    ├── tap1 ◀── qemu node1 (virtio-net 52:54:00:77:n:01)│
//     │   owner/owner.key         │    ├── tap2 ◀── qemu node2                              │
//     │   node1.disk.img ◀────────┼────┼── virtio disk                                     │
//     │   node1.parameters.pb ────┼────┼─▶ fw_cfg dev.nodecore/parameters.pb                │
//     │  (node1.storage-test-key ─┼────┼─▶ fw_cfg dev.nodecore/storage-test-key, optional)  │
//     │   node1.qmp.sock ◀────────┼────┼── QMP (system_powerdown, system_reset, quit, ...)  │
//     │   node1.console.log ◀─────┼────┴── serial console (echoed as "[node1] ...")        │
//     │   ctl ────────────────────┼─▶ ip netns exec ... out/ctl --config owner "$@"        │
//     └─ Cluster.exec(argv) ──────┼─▶ ip netns exec ... argv  (reaches 10.77.<n>.x)        │
//                                 └────────────────────────────────────────────────────────┘
//
//   NodeVm:  stopped ──start()──▶ running ──stop({clean}) / kill()──▶ stopped
//            reboot() = stop + start on the same disk; reset() = QMP system_reset
//
// Files: network_namespace.ts (namespace, bridge, taps), dhcp_server.ts
// (dnsmasq), cluster_dir.ts (what lives where on the host),
// node_parameters.ts (owner key, NodeParameters, storage test keys),
// node_vm.ts (one qemu), qmp.ts (QMP client), serial_console.ts (console
// lines and waits), boot_milestones.ts (what the console says when),
// teardown.ts (signals and exit), launcher.ts (createCluster, Cluster),
// ctl_wrapper.ts (the cluster's ctl script), build_outputs.ts (bring out/
// up to date), cluster.ts (`bun run cluster`) and launcher_args.ts (its
// command line).
//
// Node 1 gets bootstrap parameters (the launcher's owner key). Nodes 2..N
// need register parameters, whose ticket only the running cluster can issue:
// formCluster() (cluster_formation.ts) takes ownership with out/ctl inside
// the namespace, fetches them, boots the nodes, approves them and gives them
// the consensus role.
//
// Invariants:
//  - Guest traffic never leaves the namespace: no veth to the host, no
//    forwarding, dnsmasq announces no router or DNS server.
//  - Nothing outlives the launcher: close() tears down VMs, dnsmasq, taps,
//    bridge and namespace, and runs on Ctrl-C, SIGTERM, SIGHUP and process
//    exit. Children run in their own session (a terminal's Ctrl-C reaches
//    only the launcher) with a parent-death signal, so even a SIGKILLed
//    launcher leaves no VM, and the next launch of that cluster removes its
//    namespace. A Ctrl-C while the cluster is being prepared undoes what is
//    there so far.
//  - A cluster's namespace is nodecore-<name> at every launch, so its ctl
//    script keeps working.
//  - Node i always has the same name, MAC, tap and address.
//  - A node's disk, parameters and storage test key stay the same across
//    its reboots; a fresh launch starts from new ones. The launcher only ever
//    empties a directory that carries its marker, and one launcher at a time
//    uses a cluster directory.
//  - The disk template is never booted: every node boots its own copy.
//  - Console timings are host receive times: the guest's clocks are not the host's.

export { createCluster, Cluster, nodeMac, CLUSTER_DIRS, DEFAULT_CLUSTER_NAME, DEFAULT_NODE_COUNT, type ClusterOptions, type NodeSpec } from "./launcher.ts";
export { NodeVm, NodeVmError, DEFAULT_POWERDOWN_TIMEOUT_MS, type NodeExit, type NodeState } from "./node_vm.ts";
export { SerialConsole, ConsoleWaitError, type ConsoleLine } from "./serial_console.ts";
export { QmpClient, QmpError, type QmpEvent } from "./qmp.ts";
export { awaitedMilestone, bootMilestones, formatMilestones, BOOT_MILESTONES, CONSOLE, type Milestone } from "./boot_milestones.ts";
export { ensureBuilt } from "./build_outputs.ts";
export { formCluster, ctlFor, waitForVoters, type FormedCluster, type FormationOptions, type FormationStage } from "./cluster_formation.ts";
export { CTL_BINARY, ETCDCTL_BINARY, KUBECTL_BINARY, ctlWrapperScript, kubectlWrapperScript, writeCtlWrapper, writeKubectlWrapper, type CtlWrapperSpec } from "./ctl_wrapper.ts";
export { encodeNodeParameters, loadOrCreateOwnerKey, FW_CFG_PARAMETERS, FW_CFG_STORAGE_TEST_KEY, STORAGE_TEST_KEY_BYTES, type NodeParametersSpec, type OwnerKey } from "./node_parameters.ts";
export { NetworkNamespace, enterNamespace, namespaceName, nodeAddress, subnetOf, BRIDGE_NAME, NAMESPACE_PREFIX, type Subnet } from "./network_namespace.ts";
export { runHostCommand, type HostCommandResult } from "./host_command.ts";
export { httpBody, httpGetCommand } from "./pod_http.ts";
export { GATEWAY_NAME, LAN_ZONE } from "./dhcp_server.ts";
export type { NodeFiles } from "./cluster_dir.ts";
