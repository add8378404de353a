// The DHCP client state machine (RFC 2131 section 4.4), over a DhcpTransport.
//
//        ┌──────────────────────────────────────────────────────────┐
//        ▼                                                          │
//      init ── DISCOVER (broadcast, retransmitted with backoff) ──▶ OFFER
//        ▲                                                          │
//        │ NAK, or no ACK after                                     ▼
//        │ requestAttempts REQUESTs ◀──────────────────────── requesting
//        │                                                          │ ACK → onLease
//        │                                                          ▼
//        │                                            ┌────────── bound ◀────────┐
//        │                                            │ T1                        │
//        │                                            ▼                           │ ACK → onLease
//        │                                        renewing ── REQUEST unicast ────┤
//        │                                            │ T2 without an answer      │
//        │                                            ▼                           │
//        ├── expiry, or NAK → onLeaseLost ────── rebinding ── REQUEST broadcast ──┘
//
// The client never returns: it runs until its signal aborts. Callers learn
// about the address only through onLease/onLeaseLost, which it awaits, so the
// interface is configured before the client moves on.

import type { Logger } from "../log/mod.ts";
import { sleep } from "../supervisor/mod.ts";
import { decodeDhcpMessage, DhcpOption, DHCP_SERVER_PORT, encodeDhcpMessage, type DhcpMessage, type DhcpMessageType, type DhcpOptions } from "./dhcp_message.ts";
import type { Destination, DhcpTransport } from "./dhcp_socket.ts";
import { ANY_ADDRESS, BROADCAST_ADDRESS, classfulPrefixLength, prefixLengthOf } from "./ipv4.ts";

/** A state the client should never reach; a bug, not a network condition. */
export class DhcpClientError extends Error {
  override name = "DhcpClientError";
}

/** An address the client holds, with what the server said about it. */
export interface DhcpLease {
  address: string;
  prefixLength: number;
  routers: string[];
  dnsServers: string[];
  /** Option 42: where the node's clock syncs (internal/timesync); may be empty. */
  ntpServers: string[];
  hostname?: string;
  domainName?: string;
  /** The server that granted the lease (option 54), where renewals go. */
  serverId: string;
  /** As granted; 0xffffffff means infinite. */
  leaseSeconds: number;
  /** performance.now() times of T1, T2 and expiry; Infinity for an infinite lease. */
  renewAt: number;
  rebindAt: number;
  expiresAt: number;
}

export interface DhcpTimings {
  /** First retransmission interval of DISCOVER and REQUEST; it doubles per attempt (RFC 2131 4.1). */
  retransmitInitialMs: number;
  retransmitMaxMs: number;
  /** Random spread of each retransmission interval, as a fraction of it (±). */
  retransmitJitter: number;
  /** REQUESTs sent for one offer before starting over with DISCOVER. */
  requestAttempts: number;
  /** Pause before discovering again after an offered address could not be had, so a refusing server is not flooded. */
  restartDelayMs: number;
  /** Shortest interval between REQUESTs while renewing or rebinding (RFC 2131 4.4.5: 60 s). */
  renewRetransmitMinMs: number;
  /** How long one second of lease time lasts; only tests change it. */
  secondMs: number;
}

export const DEFAULT_DHCP_TIMINGS: DhcpTimings = {
  retransmitInitialMs: 2_000,
  retransmitMaxMs: 64_000,
  retransmitJitter: 0.25,
  requestAttempts: 4,
  restartDelayMs: 2_000,
  renewRetransmitMinMs: 60_000,
  secondMs: 1_000,
};

/** DISCOVERs without an offer after which the client warns that it is still trying. */
export const NO_OFFER_WARN_ATTEMPTS = 4;
/** setTimeout's longest delay; longer waits (long leases) sleep in steps. */
const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;
const INFINITE_LEASE_SECONDS = 0xffffffff;
/** T1 and T2 as fractions of the lease when the server does not send them (RFC 2131 4.4.5). */
const RENEW_FRACTION = 0.5;
const REBIND_FRACTION = 0.875;
const CLIENT_ID_TYPE_ETHERNET = 1;
const PARAMETER_REQUEST_LIST = [
  DhcpOption.subnetMask,
  DhcpOption.router,
  DhcpOption.dnsServer,
  DhcpOption.ntpServer,
  DhcpOption.hostname,
  DhcpOption.domainName,
  DhcpOption.leaseTime,
  DhcpOption.serverId,
  DhcpOption.renewalTime,
  DhcpOption.rebindingTime,
];

export interface DhcpClientOptions {
  signal: AbortSignal;
  logger: Logger;
  /** The interface's MAC address (chaddr and client identifier). */
  hardwareAddress: Uint8Array;
  /** Sent as option 12, so the server can register the node's name. */
  hostname?: string;
  /** A lease still held from an earlier run: it is applied again and renewed at once. */
  lease?: DhcpLease;
  timings?: Partial<DhcpTimings>;
  /** A new or renewed lease: configure the interface. Awaited; throwing ends the client. */
  onLease(lease: DhcpLease): void | Promise<void>;
  /** The address must no longer be used (the lease expired, or the server refused it). */
  onLeaseLost(reason: string): void | Promise<void>;
}

type ClientState =
  | { name: "init" }
  | { name: "requesting"; offer: DhcpMessage; startedAt: number }
  | { name: "bound"; lease: DhcpLease }
  | { name: "renewing"; lease: DhcpLease }
  | { name: "rebinding"; lease: DhcpLease };

/** What a REQUEST got: a lease, a refusal, or nothing before the client gave up. */
type RequestOutcome = { kind: "ack"; lease: DhcpLease } | { kind: "nak"; message: string } | { kind: "no answer" };

/** Runs the DHCP client until `options.signal` aborts; it rejects with the signal's reason then. */
export async function runDhcpClient(transport: DhcpTransport, options: DhcpClientOptions): Promise<never> {
  return await new DhcpClient(transport, options).run();
}

class DhcpClient {
  private readonly timings: DhcpTimings;
  private readonly signal: AbortSignal;
  private readonly logger: Logger;

  constructor(
    private readonly transport: DhcpTransport,
    private readonly options: DhcpClientOptions,
  ) {
    this.timings = { ...DEFAULT_DHCP_TIMINGS, ...options.timings };
    this.signal = options.signal;
    this.logger = options.logger;
  }

  async run(): Promise<never> {
    let state = await this.initialState();
    for (;;) {
      this.signal.throwIfAborted();
      switch (state.name) {
        case "init": {
          const startedAt = performance.now();
          const offer = await this.discover(startedAt);
          state = { name: "requesting", offer, startedAt };
          break;
        }
        case "requesting": {
          const outcome = await this.request(state.offer, state.startedAt);
          if (outcome.kind === "ack") {
            await this.options.onLease(outcome.lease);
            state = { name: "bound", lease: outcome.lease };
          } else {
            const why = outcome.kind === "nak" ? `server refused it: ${outcome.message}` : "no answer from the server";
            this.logger.warn(`could not get offered address ${state.offer.yiaddr}, discovering again`, { reason: why });
            await sleep(this.timings.restartDelayMs, this.signal);
            state = { name: "init" };
          }
          break;
        }
        case "bound":
          await sleepUntil(state.lease.renewAt, this.signal);
          this.logger.info(`renewing lease of ${state.lease.address} with ${state.lease.serverId}`);
          state = { name: "renewing", lease: state.lease };
          break;
        case "renewing":
        case "rebinding": {
          const outcome = await this.extend(state.lease, state.name);
          switch (outcome.kind) {
            case "ack":
              await this.options.onLease(outcome.lease);
              state = { name: "bound", lease: outcome.lease };
              break;
            case "nak":
              await this.options.onLeaseLost(`server refused to extend the lease: ${outcome.message}`);
              state = { name: "init" };
              break;
            case "no answer":
              if (state.name === "renewing") {
                this.logger.warn(`no answer from ${state.lease.serverId}, asking any server to extend the lease`);
                state = { name: "rebinding", lease: state.lease };
              } else {
                await this.options.onLeaseLost("lease expired");
                state = { name: "init" };
              }
              break;
            default:
              unreachable(outcome);
          }
          break;
        }
        default:
          unreachable(state);
      }
    }
  }

  /** Where a run starts: from scratch, or renewing a lease an earlier run still holds. */
  private async initialState(): Promise<ClientState> {
    const lease = this.options.lease;
    if (lease === undefined) return { name: "init" };
    if (lease.expiresAt <= performance.now()) {
      await this.options.onLeaseLost("lease expired");
      return { name: "init" };
    }
    await this.options.onLease(lease);
    this.logger.info(`renewing lease of ${lease.address} held from before`);
    return { name: "renewing", lease };
  }

  /** Broadcasts DISCOVERs until a server offers an address. */
  private async discover(startedAt: number): Promise<DhcpMessage> {
    const xid = newXid();
    const offer = await this.exchange({
      type: "discover",
      message: () => this.message("discover", { xid, startedAt, broadcast: true }),
      to: { address: BROADCAST_ADDRESS, port: DHCP_SERVER_PORT },
      accept: (reply) => (reply.xid === xid && reply.options.messageType === "offer" && reply.yiaddr !== ANY_ADDRESS && reply.options.serverId !== undefined ? reply : undefined),
      nextWaitMs: (attempt) => {
        if (attempt === NO_OFFER_WARN_ATTEMPTS) this.logger.warn(`no DHCP offer after ${attempt} attempts, still trying`);
        return this.backoffMs(attempt);
      },
    });
    // An exchange without a deadline ends only with an answer (or by throwing on abort).
    if (offer === undefined) throw new DhcpClientError("dhcp discover ended without an offer");
    this.logger.info(`got offer of ${offer.yiaddr} from ${offer.options.serverId}`);
    return offer;
  }

  /** Broadcasts REQUESTs for an offered address (SELECTING → REQUESTING). */
  private async request(offer: DhcpMessage, startedAt: number): Promise<RequestOutcome> {
    const serverId = offer.options.serverId;
    const requestedAt = performance.now();
    const outcome = await this.exchange<RequestOutcome>({
      type: "request",
      message: () =>
        this.message("request", {
          xid: offer.xid,
          startedAt,
          broadcast: true,
          options: { requestedAddress: offer.yiaddr, serverId },
        }),
      to: { address: BROADCAST_ADDRESS, port: DHCP_SERVER_PORT },
      accept: (reply, from) => {
        if (reply.xid !== offer.xid) return undefined;
        // Other servers see our REQUEST too; only the chosen one answers for it.
        if (reply.options.serverId !== undefined && reply.options.serverId !== serverId) return undefined;
        return this.outcomeOf(reply, from, requestedAt);
      },
      nextWaitMs: (attempt) => (attempt < this.timings.requestAttempts ? this.backoffMs(attempt) : undefined),
    });
    return outcome ?? { kind: "no answer" };
  }

  /** Asks to extend a lease: the granting server by unicast (renewing), or any server by broadcast (rebinding). */
  private async extend(lease: DhcpLease, mode: "renewing" | "rebinding"): Promise<RequestOutcome> {
    const xid = newXid();
    const startedAt = performance.now();
    const until = mode === "renewing" ? lease.rebindAt : lease.expiresAt;
    const outcome = await this.exchange<RequestOutcome>({
      type: "request",
      // ciaddr says "extend the lease of this address"; requested address and server id must be absent.
      message: () => this.message("request", { xid, startedAt, broadcast: false, ciaddr: lease.address }),
      to: { address: mode === "renewing" ? lease.serverId : BROADCAST_ADDRESS, port: DHCP_SERVER_PORT },
      accept: (reply, from) => (reply.xid === xid ? this.outcomeOf(reply, from, startedAt) : undefined),
      nextWaitMs: () => {
        const remaining = until - performance.now();
        if (remaining <= 0) return undefined;
        return Math.min(remaining, Math.max(this.timings.renewRetransmitMinMs, remaining / 2));
      },
    });
    return outcome ?? { kind: "no answer" };
  }

  /** The outcome an ACK or NAK stands for; undefined for any other reply or an unusable ACK. */
  private outcomeOf(reply: DhcpMessage, from: string, requestedAt: number): RequestOutcome | undefined {
    switch (reply.options.messageType) {
      case "nak":
        return { kind: "nak", message: reply.options.message ?? "no reason given" };
      case "ack": {
        const lease = this.leaseOf(reply, from, requestedAt);
        return lease && { kind: "ack", lease };
      }
      default:
        return undefined;
    }
  }

  /** The lease an ACK grants, measured from when it was requested; undefined (and a warning) if it is unusable. */
  private leaseOf(ack: DhcpMessage, from: string, requestedAt: number): DhcpLease | undefined {
    const { options } = ack;
    const unusable = (reason: string) => {
      this.logger.warn(`ignoring DHCP ack from ${from}: ${reason}`);
      return undefined;
    };
    if (ack.yiaddr === ANY_ADDRESS) return unusable("it assigns no address");
    if (options.leaseSeconds === undefined) return unusable("it has no lease time");
    let prefixLength: number;
    try {
      prefixLength = options.subnetMask !== undefined ? prefixLengthOf(options.subnetMask) : classfulPrefixLength(ack.yiaddr);
    } catch (err) {
      return unusable((err as Error).message);
    }
    const leaseSeconds = options.leaseSeconds;
    let renewSeconds = options.renewalSeconds ?? leaseSeconds * RENEW_FRACTION;
    let rebindSeconds = options.rebindingSeconds ?? leaseSeconds * REBIND_FRACTION;
    if (!(renewSeconds < rebindSeconds && rebindSeconds < leaseSeconds)) {
      renewSeconds = leaseSeconds * RENEW_FRACTION;
      rebindSeconds = leaseSeconds * REBIND_FRACTION;
    }
    const at = (seconds: number) => (leaseSeconds === INFINITE_LEASE_SECONDS ? Infinity : requestedAt + seconds * this.timings.secondMs);
    return {
      address: ack.yiaddr,
      prefixLength,
      routers: options.routers ?? [],
      dnsServers: options.dnsServers ?? [],
      ntpServers: options.ntpServers ?? [],
      ...(options.hostname !== undefined ? { hostname: options.hostname } : {}),
      ...(options.domainName !== undefined ? { domainName: options.domainName } : {}),
      serverId: options.serverId ?? from,
      leaseSeconds,
      renewAt: at(renewSeconds),
      rebindAt: at(rebindSeconds),
      expiresAt: at(leaseSeconds),
    };
  }

  /**
   * Sends a message and waits for a reply `accept` takes, retransmitting
   * after each interval `nextWaitMs` gives; undefined once it gives none.
   */
  private async exchange<T>(exchange: {
    type: DhcpMessageType;
    message: () => DhcpMessage;
    to: Destination;
    accept: (reply: DhcpMessage, from: string) => T | undefined;
    nextWaitMs: (attempt: number) => number | undefined;
  }): Promise<T | undefined> {
    for (let attempt = 0; ; attempt++) {
      const waitMs = exchange.nextWaitMs(attempt);
      if (waitMs === undefined) return undefined;
      const message = exchange.message();
      const sent = this.transport.send(encodeDhcpMessage(message), exchange.to);
      this.logger.debug(sent ? `sent DHCP ${exchange.type}` : `DHCP ${exchange.type} was dropped by the kernel`, {
        to: exchange.to.address,
        xid: message.xid,
        attempt,
        waitMs: Math.round(waitMs),
      });
      const deadline = performance.now() + waitMs;
      for (;;) {
        const datagram = await this.transport.receive(deadline, this.signal);
        if (datagram === undefined) break;
        let reply: DhcpMessage;
        try {
          reply = decodeDhcpMessage(datagram.data);
        } catch (err) {
          this.logger.debug("ignoring malformed DHCP message", { from: datagram.from, error: err });
          continue;
        }
        if (reply.op !== "reply" || !sameBytes(reply.chaddr, this.options.hardwareAddress)) continue;
        const accepted = exchange.accept(reply, datagram.from);
        if (accepted !== undefined) return accepted;
      }
    }
  }

  /** The interval before retransmission `attempt` (0-based): doubling, capped, with jitter. */
  private backoffMs(attempt: number): number {
    const { retransmitInitialMs, retransmitMaxMs, retransmitJitter } = this.timings;
    const base = Math.min(retransmitMaxMs, retransmitInitialMs * 2 ** attempt);
    return base * (1 + retransmitJitter * (2 * Math.random() - 1));
  }

  /** A client message with what every client message carries. */
  private message(type: DhcpMessageType, fields: { xid: number; startedAt: number; broadcast: boolean; ciaddr?: string; options?: DhcpOptions }): DhcpMessage {
    const mac = this.options.hardwareAddress;
    return {
      op: "request",
      xid: fields.xid,
      secs: Math.min(0xffff, Math.floor((performance.now() - fields.startedAt) / 1000)),
      broadcast: fields.broadcast,
      ciaddr: fields.ciaddr ?? ANY_ADDRESS,
      yiaddr: ANY_ADDRESS,
      siaddr: ANY_ADDRESS,
      giaddr: ANY_ADDRESS,
      chaddr: mac,
      options: {
        messageType: type,
        clientId: Uint8Array.from([CLIENT_ID_TYPE_ETHERNET, ...mac]),
        parameterRequestList: PARAMETER_REQUEST_LIST,
        ...(this.options.hostname !== undefined ? { hostname: this.options.hostname } : {}),
        ...fields.options,
      },
    };
  }
}

/** Sleeps until the performance.now() time `deadline` (which may be Infinity). */
async function sleepUntil(deadline: number, signal: AbortSignal): Promise<void> {
  for (;;) {
    const remaining = deadline - performance.now();
    if (remaining <= 0) return;
    await sleep(Math.min(remaining, MAX_TIMER_DELAY_MS), signal);
  }
}

function newXid(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0]!;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && a.every((byte, i) => byte === b[i]);
}

function unreachable(value: never): never {
  throw new DhcpClientError(`dhcp client reached an impossible state: ${JSON.stringify(value)}`);
}
