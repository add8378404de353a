// Network: the node's runnable that configures its NIC from DHCP and
// publishes the address. See mod.ts for the package's story.

import { Value } from "../event/mod.ts";
import type { Logger } from "../log/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";
import { runDhcpClient, type DhcpLease, type DhcpTimings } from "./dhcp_client.ts";
import { DhcpSocket } from "./dhcp_socket.ts";
import { addDefaultRoute, clearAddress, configureLoopback, deleteDefaultRoute, findInterface, hardwareAddress, setAddress, setLinkUp, SYS_CLASS_NET } from "./interface_config.ts";

/** The node's IPv4 configuration, as its DHCP lease gives it. */
export interface NodeAddress {
  interface: string;
  address: string;
  prefixLength: number;
  /** The default gateway, if the server named one. */
  router?: string;
  dnsServers: string[];
  /** NTP servers the lease names (option 42); may be empty. */
  ntpServers: string[];
  /** What the server calls the node (option 12), if it said. */
  hostname?: string;
  domainName?: string;
  /** The DHCP server that granted the lease. */
  dhcpServer: string;
  leaseSeconds: number;
}

export interface NetworkOptions {
  /** The interface to configure. Default: the first Ethernet interface in /sys/class/net. */
  interfaceName?: string;
  /** Sent to the DHCP server as the node's name (option 12). */
  hostname?: string;
  /** Where to list interfaces; only tests change it. */
  sysClassNet?: string;
  /** DHCP retransmission and lease timing; only tests change it. */
  dhcpTimings?: Partial<DhcpTimings>;
}

export class NoInterfaceError extends Error {
  override name = "NoInterfaceError";
}

/** The lease this object has put on an interface. */
interface HeldLease {
  interfaceName: string;
  lease: DhcpLease;
}

export class Network {
  /**
   * Written by run(); read by everything that needs the node's address. Unset
   * until the first lease; undefined after a lease is lost, until the next.
   */
  readonly address = new Value<NodeAddress | undefined>();
  /** Survives restarts of run(), so a new run renews the lease instead of dropping the address. */
  private held: HeldLease | undefined;
  /** The default route this object added, so that a new router replaces it. */
  private route: { interfaceName: string; gateway: string } | undefined;

  constructor(private readonly options: NetworkOptions = {}) {}

  /** The node's address, waiting until it has one. */
  async getAddress(options: { signal?: AbortSignal } = {}): Promise<NodeAddress> {
    return await this.address.waitFor((a) => a !== undefined, options);
  }

  /**
   * The runnable: brings up lo and the NIC, then runs the DHCP client until
   * cancelled. Healthy once the interface has an address. Cancellation leaves
   * the address in place; the next run renews it.
   */
  readonly run: Runnable = async (ctx) => {
    const { signal, logger } = ctx;
    configureLoopback();
    const root = this.options.sysClassNet ?? SYS_CLASS_NET;
    const interfaceName = this.options.interfaceName ?? findInterface({ sysClassNet: root });
    if (interfaceName === undefined) throw new NoInterfaceError(`no ethernet interface in ${root}`);
    setLinkUp(interfaceName);
    const mac = hardwareAddress(interfaceName);
    const held = this.held?.interfaceName === interfaceName ? this.held.lease : undefined;
    if (held === undefined) {
      logger.info(`waiting for DHCP lease on ${interfaceName}`, { mac: formatMac(mac) });
    }
    using socket = DhcpSocket.open(interfaceName);
    try {
      await runDhcpClient(socket, {
        signal,
        logger,
        hardwareAddress: mac,
        ...(this.options.hostname !== undefined ? { hostname: this.options.hostname } : {}),
        ...(held !== undefined ? { lease: held } : {}),
        ...(this.options.dhcpTimings !== undefined ? { timings: this.options.dhcpTimings } : {}),
        onLease: (lease) => {
          this.apply(interfaceName, lease, logger);
          ctx.signalHealthy();
        },
        onLeaseLost: (reason) => this.drop(interfaceName, reason, logger),
      });
    } catch (err) {
      if (signal.aborted) return;
      throw err;
    }
  };

  /** Puts a lease on the interface (idempotent: renewals re-apply it) and publishes it if it changed. */
  private apply(interfaceName: string, lease: DhcpLease, logger: Logger): void {
    setAddress(interfaceName, lease.address, lease.prefixLength);
    const router = lease.routers[0];
    const route = this.route;
    if (route !== undefined && (route.interfaceName !== interfaceName || route.gateway !== router)) {
      deleteDefaultRoute(route.interfaceName, route.gateway);
      this.route = undefined;
    }
    // Always (re-)added: replacing the address may have taken the route with it.
    if (router !== undefined) {
      addDefaultRoute(interfaceName, router);
      this.route = { interfaceName, gateway: router };
    }
    this.held = { interfaceName, lease };

    const next = nodeAddressOf(interfaceName, lease);
    const previous = this.address.peek();
    const cidr = `${next.address}/${next.prefixLength}`;
    const fields = { router: next.router ?? "none", dns: next.dnsServers.join(","), leaseSeconds: next.leaseSeconds };
    if (previous !== undefined && JSON.stringify(previous) === JSON.stringify(next)) {
      logger.debug(`renewed lease of ${cidr}`, fields);
      return;
    }
    if (previous === undefined) logger.info(`got address ${cidr} via DHCP from ${next.dhcpServer}`, fields);
    else logger.info(`address changed from ${previous.address}/${previous.prefixLength} to ${cidr}`, fields);
    this.address.set(next);
  }

  /** Takes a lost lease's address off the interface and publishes that the node has none. */
  private drop(interfaceName: string, reason: string, logger: Logger): void {
    const lost = this.held?.lease.address ?? "address";
    logger.warn(`lost ${lost} on ${interfaceName}: ${reason}; waiting for a new DHCP lease`);
    clearAddress(interfaceName);
    this.route = undefined; // The kernel removed it with the address.
    this.held = undefined;
    this.address.set(undefined);
  }
}

function nodeAddressOf(interfaceName: string, lease: DhcpLease): NodeAddress {
  const router = lease.routers[0];
  return {
    interface: interfaceName,
    address: lease.address,
    prefixLength: lease.prefixLength,
    ...(router !== undefined ? { router } : {}),
    dnsServers: lease.dnsServers,
    ntpServers: lease.ntpServers,
    ...(lease.hostname !== undefined ? { hostname: lease.hostname } : {}),
    ...(lease.domainName !== undefined ? { domainName: lease.domainName } : {}),
    dhcpServer: lease.serverId,
    leaseSeconds: lease.leaseSeconds,
  };
}

function formatMac(mac: Uint8Array): string {
  return [...mac].map((b) => b.toString(16).padStart(2, "0")).join(":");
}
