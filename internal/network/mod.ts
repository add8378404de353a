// Package network: brings up the node's NIC, gets an IPv4 address for it by
// DHCP, and publishes that address as a watchable value.
//
// The node image has no shell, no iproute2 and no DHCP client, so this
// package does both jobs itself: interfaces are configured through the
// kernel's classic ioctls (SIOCSIFFLAGS, SIOCSIFADDR, SIOCSIFNETMASK,
// SIOCADDRT) called through internal/sys's libc binding, and the DHCP client
// (RFC 2131) is written here, over a UDP socket bound to the NIC with
// SO_BINDTODEVICE.
//
//   /sys/class/net ──▶ first ethernet interface (or NetworkOptions.interfaceName)
//                                  │
//   Network.run(ctx)               ▼
//     lo up, 127.0.0.1/8     link up (IFF_UP)
//                                  │
//                                  ▼
//                       DHCP client (dhcp_client.ts) ◀──▶ DhcpSocket 0.0.0.0:68 ◀──▶ DHCP server
//     DISCOVER → OFFER → REQUEST → ACK;  renew at T1, rebind at T2, start over on expiry/NAK
//                │ onLease                          │ onLeaseLost
//                ▼                                  ▼
//     address + netmask, default route       address removed (routes go with it)
//                │                                  │
//                └──────────────┬───────────────────┘
//                               ▼
//              Network.address: Value<NodeAddress | undefined> ──▶ consumers
//              (getAddress() waits for one; the runnable is healthy from the first)
//
// Invariants:
//  - Network.address holds an address only while a lease for it is current
//    and the address is on the interface: the interface is configured first,
//    then the value is published. Renewals that change nothing publish nothing.
//  - Cancelling the runnable leaves the address on the interface. The Network
//    object keeps the lease, and the next run re-applies and renews it instead
//    of dropping the node off the network.
//  - Every wait (retransmission, receive, lease timers) takes the runnable's
//    signal; receiving never blocks the event loop (MSG_DONTWAIT and polling).
//  - Nothing here starts a process: configuring a failed interface throws an
//    InterfaceError that names the interface and the errno, and the supervisor
//    restarts the runnable.
//
// Beyond the NIC: netlink.ts speaks netlink (rtnetlink and generic netlink)
// without iproute2, and rtnetlink.ts makes links of a kind and the node
// core's own routes (protocol RTPROT_NODECORE), for the cluster network
// (internal/clusternet).
//
// Left out: DHCP INIT-REBOOT after a reboot (leases are not persisted), ARP
// probing of an offered address (DECLINE), RELEASE on shutdown, IPv6, DNS
// resolver configuration (the servers are published for whoever needs them).

export { Network, NoInterfaceError, type NodeAddress, type NetworkOptions } from "./network.ts";
export { DEFAULT_DHCP_TIMINGS, type DhcpTimings } from "./dhcp_client.ts";
export { InterfaceError, setAddress, setLinkUp } from "./interface_config.ts";
export { DhcpSocketError } from "./dhcp_socket.ts";
export { isIPv4 } from "./ipv4.ts";
export {
  NetlinkSocket,
  NetlinkError,
  NETLINK_ROUTE,
  NETLINK_GENERIC,
  NLM_F_REQUEST,
  NLM_F_ACK,
  NLM_F_DUMP,
  attr,
  concat,
  decodeAttributes,
  encodeAttributes,
  withNetlink,
  type Attribute,
  type Message,
} from "./netlink.ts";
export {
  addRule,
  createLink,
  deleteLink,
  deleteRoute,
  deleteRule,
  linkIndex,
  ourRoutes,
  ourRules,
  replaceRoute,
  RT_TABLE_MAIN,
  RTPROT_NODECORE,
  type LinkRoute,
  type SourceRule,
} from "./rtnetlink.ts";
