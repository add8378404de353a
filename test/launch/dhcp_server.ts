// DHCP for the cluster network: Debian's dnsmasq binary (dnsmasq-base),
// run inside the namespace on the bridge only, with one static lease per
// node MAC so that node i always gets the same address. No router is
// announced: nothing lies beyond the bridge. It is the network's DNS
// server too, announced in the leases, for one zone of its own only
// (LAN_ZONE: the bridge's host is gateway.<zone>) and forwarding nothing,
// as a site's resolver would be for the nodes: the cluster DNS forwards
// names outside the cluster there.

import { appendFileSync } from "node:fs";
import type { Subprocess } from "bun";
import { stopHostProcess } from "./host_command.ts";
import { BRIDGE_NAME, type NetworkNamespace, type Subnet } from "./network_namespace.ts";

export const DNSMASQ_BINARY = "/usr/sbin/dnsmasq";
/** Long enough that no lease expires during a test or a working session. */
export const LEASE_TIME = "12h";
/** How long dnsmasq gets to exit after SIGTERM before SIGKILL. */
const STOP_GRACE_MS = 3_000;
/** How long to wait for dnsmasq to say it is serving. */
const READY_TIMEOUT_MS = 10_000;
const READY_LINE = /DHCP, static leases only/;

export interface StaticLease {
  mac: string;
  address: string;
  hostname: string;
}

export interface DhcpServerOptions {
  leaseFile: string;
  logFile: string;
  leases: readonly StaticLease[];
  /** Announce the bridge's address as the network's NTP server (option 42): the launcher runs one there (time_server.ts). */
  ntpServer?: boolean;
}

/** The zone the network's DNS server answers for, and the name of the bridge's host in it. */
export const LAN_ZONE = "lan.test";
export const GATEWAY_NAME = `gateway.${LAN_ZONE}`;

/** dnsmasq's argv: DHCP on the bridge only, static leases only; DNS for LAN_ZONE only. */
export function dnsmasqArgs(subnet: Subnet, options: DhcpServerOptions): string[] {
  return [
    DNSMASQ_BINARY,
    "--conf-file=/dev/null",
    "--no-daemon",
    "--bind-interfaces",
    `--interface=${BRIDGE_NAME}`,
    "--except-interface=lo",
    // DNS on the bridge's address, for LAN_ZONE alone; nothing is forwarded anywhere.
    `--listen-address=${subnet.bridgeAddress}`,
    `--local=/${LAN_ZONE}/`,
    `--host-record=${GATEWAY_NAME},${subnet.bridgeAddress}`,
    "--no-hosts",
    "--no-resolv",
    "--log-facility=-",
    "--log-dhcp",
    `--dhcp-leasefile=${options.leaseFile}`,
    "--dhcp-authoritative",
    // "static": only the hosts below get addresses.
    `--dhcp-range=${subnet.prefix}.0,static,255.255.255.0,${LEASE_TIME}`,
    // An empty value: announce no router. The DNS server announced is this one.
    "--dhcp-option=option:router",
    `--dhcp-option=option:dns-server,${subnet.bridgeAddress}`,
    ...(options.ntpServer ? [`--dhcp-option=option:ntp-server,${subnet.bridgeAddress}`] : []),
    ...options.leases.map((l) => `--dhcp-host=${l.mac},${l.address},${l.hostname},${LEASE_TIME}`),
  ];
}

export class DhcpServer {
  private exited = false;

  private constructor(private readonly child: Subprocess<"ignore", "pipe", "pipe">) {
    void child.exited.then(() => {
      this.exited = true;
    });
  }

  /** Starts dnsmasq in the namespace and waits until it serves. Its log goes to logFile. */
  static async start(ns: NetworkNamespace, options: DhcpServerOptions): Promise<DhcpServer> {
    const child = ns.spawn(dnsmasqArgs(ns.subnet, options)) as Subprocess<"ignore", "pipe", "pipe">;
    const server = new DhcpServer(child);
    let ready!: () => void;
    const readyPromise = new Promise<void>((resolve) => (ready = resolve));
    const pump = async (stream: ReadableStream<Uint8Array>) => {
      const decoder = new TextDecoder();
      for await (const chunk of stream) {
        const text = decoder.decode(chunk, { stream: true });
        appendFileSync(options.logFile, text);
        if (READY_LINE.test(text)) ready();
      }
    };
    void pump(child.stdout);
    void pump(child.stderr);
    const outcome = await Promise.race([readyPromise.then(() => "ready" as const), child.exited.then(() => "exited" as const), Bun.sleep(READY_TIMEOUT_MS).then(() => "timeout" as const)]);
    if (outcome !== "ready") {
      await server.stop();
      throw new Error(`dnsmasq did not start (${outcome}); see ${options.logFile}`);
    }
    return server;
  }

  get pid(): number {
    return this.child.pid;
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    await stopHostProcess(this.child, STOP_GRACE_MS);
  }

  /** stop() without the event loop, for process exit. */
  stopSync(): void {
    if (this.exited) return;
    try {
      this.child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  }
}
