// The DHCP client against a fake server on a fake transport, with lease
// seconds shortened to milliseconds. Once bound, the client renews every
// 100 ms, so tests pick the events and requests they check by what they
// are, never by their count or their place at the end of a list.

import { afterEach, describe, expect, test } from "bun:test";
import { captureLogger } from "../log/mod.ts";
import { eventually } from "../testing/mod.ts";
import { runDhcpClient, type DhcpLease, type DhcpTimings } from "./dhcp_client.ts";
import { decodeDhcpMessage, encodeDhcpMessage, type DhcpMessage } from "./dhcp_message.ts";
import type { Datagram, Destination, DhcpTransport } from "./dhcp_socket.ts";

const MAC = Uint8Array.from([0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc]);
const SERVER = "10.0.0.1";
const OFFERED = "10.0.0.42";
/** One lease second lasts 10 ms: a 20 s lease renews after 100 ms, rebinds after 175 ms, expires after 200 ms. */
const FAST: Partial<DhcpTimings> = {
  retransmitInitialMs: 20,
  retransmitMaxMs: 80,
  retransmitJitter: 0,
  requestAttempts: 3,
  restartDelayMs: 20,
  renewRetransmitMinMs: 10,
  secondMs: 10,
};
const LEASE_SECONDS = 20;
/**
 * A lease whose T1 still comes after 100 ms but whose T2 and expiry are far
 * off (8.75 s and 10 s), for tests that need the client to renew first: a
 * test process stalled past T2 would rightly skip renewing and rebind.
 */
const LONG_LEASE = { leaseSeconds: 1000, renewalSeconds: LEASE_SECONDS / 2, rebindingSeconds: 875 };

type Answer = "ack" | "nak" | "ignore";

interface Sent {
  message: DhcpMessage;
  to: Destination;
  at: number;
  /** The server's reply to it, if it sent one. */
  reply: "offer" | "ack" | "nak" | undefined;
}

/** A DHCP server on the other end of a fake transport. Its behaviour is set through its fields. */
class FakeServer implements DhcpTransport {
  readonly sent: Sent[] = [];
  /** DISCOVERs to drop before answering. */
  dropDiscovers = 0;
  /** Replies to deliver before the real offer, to be ignored. */
  noiseBeforeOffer: (Uint8Array | DhcpMessage)[] = [];
  answerRequest: Answer = "ack";
  answerRenew: Answer = "ack";
  answerRebind: Answer = "ack";
  leaseSeconds = LEASE_SECONDS;
  /** T1 and T2 to send (options 58 and 59); the client computes them when absent. */
  renewalSeconds: number | undefined;
  rebindingSeconds: number | undefined;
  private readonly inbox: Datagram[] = [];
  private wake: (() => void) | undefined;

  send(data: Uint8Array, to: Destination): boolean {
    const message = decodeDhcpMessage(data);
    const at = performance.now();
    const reply = this.answer(message, to);
    this.sent.push({ message, to, at, reply: reply?.options.messageType as Sent["reply"] });
    if (reply !== undefined) this.deliver(reply);
    return true;
  }

  private answer(message: DhcpMessage, to: Destination): DhcpMessage | undefined {
    const reply = (type: "offer" | "ack" | "nak") => this.reply(message, type, type === "nak" ? { message: "address not available" } : {});
    switch (message.options.messageType) {
      case "discover":
        if (this.dropDiscovers > 0) {
          this.dropDiscovers--;
          return undefined;
        }
        for (const noise of this.noiseBeforeOffer.splice(0)) this.deliver(noise);
        return reply("offer");
      case "request": {
        const answer = message.ciaddr === "0.0.0.0" ? this.answerRequest : to.address === SERVER ? this.answerRenew : this.answerRebind;
        return answer === "ignore" ? undefined : reply(answer);
      }
      default:
        return undefined;
    }
  }

  reply(request: DhcpMessage, type: "offer" | "ack" | "nak", options: DhcpMessage["options"] = {}): DhcpMessage {
    return {
      op: "reply",
      xid: request.xid,
      secs: 0,
      broadcast: request.broadcast,
      ciaddr: "0.0.0.0",
      yiaddr: type === "nak" ? "0.0.0.0" : OFFERED,
      siaddr: SERVER,
      giaddr: "0.0.0.0",
      chaddr: request.chaddr,
      options: {
        messageType: type,
        serverId: SERVER,
        ...(type === "nak"
          ? {}
          : {
              leaseSeconds: this.leaseSeconds,
              ...(this.renewalSeconds !== undefined ? { renewalSeconds: this.renewalSeconds } : {}),
              ...(this.rebindingSeconds !== undefined ? { rebindingSeconds: this.rebindingSeconds } : {}),
              subnetMask: "255.255.255.0",
              routers: [SERVER],
              dnsServers: ["10.0.0.53"],
              ntpServers: ["10.0.0.123", "10.0.0.124"],
            }),
        ...options,
      },
    };
  }

  deliver(reply: DhcpMessage | Uint8Array): void {
    this.inbox.push({ data: reply instanceof Uint8Array ? reply : encodeDhcpMessage(reply), from: SERVER });
    this.wake?.();
  }

  async receive(deadline: number, signal: AbortSignal): Promise<Datagram | undefined> {
    for (;;) {
      signal.throwIfAborted();
      const datagram = this.inbox.shift();
      if (datagram !== undefined) return datagram;
      const remaining = deadline - performance.now();
      if (remaining <= 0) return undefined;
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        timer = setTimeout(resolve, remaining);
        signal.addEventListener("abort", () => resolve(), { once: true });
      });
      clearTimeout(timer);
      this.wake = undefined;
    }
  }

  requests(filter: (s: Sent) => boolean = () => true): Sent[] {
    return this.sent.filter((s) => s.message.options.messageType === "request" && filter(s));
  }
  discovers(): Sent[] {
    return this.sent.filter((s) => s.message.options.messageType === "discover");
  }
}

type ClientEvent = { kind: "lease"; lease: DhcpLease; at: number } | { kind: "lost"; reason: string; at: number };

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(stops.splice(0).map((stop) => stop()));
});

function startClient(server: FakeServer, options: { lease?: DhcpLease; timings?: Partial<DhcpTimings> } = {}) {
  const controller = new AbortController();
  const { logger, entries } = captureLogger("dhcp");
  const events: ClientEvent[] = [];
  // Before the client starts: the client counts its lease's times from
  // when it began to ask (RFC 2131 4.4.1), which is no earlier than this.
  // An event's time is later than that by however long the exchange took
  // on a loaded machine, so it cannot serve as the lease's start.
  const started = performance.now();
  const result = runDhcpClient(server, {
    signal: controller.signal,
    logger,
    hardwareAddress: MAC,
    hostname: "node-test",
    timings: FAST,
    ...options,
    onLease: (lease) => void events.push({ kind: "lease", lease, at: performance.now() }),
    onLeaseLost: (reason) => void events.push({ kind: "lost", reason, at: performance.now() }),
  }).catch((err: unknown) => err);
  const stop = async () => {
    controller.abort(new Error("test is over"));
    await result;
  };
  stops.push(stop);
  const leases = () => events.filter((e) => e.kind === "lease").map((e) => e.lease);
  return { controller, events, entries, result, leases, started };
}

describe("dhcp client", () => {
  test("dhcp client gets a lease by discover, offer, request and ack", async () => {
    const server = new FakeServer();
    const { leases } = startClient(server);
    const [lease] = await eventually(() => leases().length > 0 && leases());
    expect(lease).toMatchObject({
      address: OFFERED,
      prefixLength: 24,
      routers: [SERVER],
      dnsServers: ["10.0.0.53"],
      ntpServers: ["10.0.0.123", "10.0.0.124"],
      serverId: SERVER,
      leaseSeconds: LEASE_SECONDS,
    });
    const [discover, request] = server.sent;
    expect(discover!.to).toEqual({ address: "255.255.255.255", port: 67 });
    expect(discover!.message).toMatchObject({ op: "request", broadcast: true, ciaddr: "0.0.0.0", chaddr: MAC });
    expect(discover!.message.options).toMatchObject({ hostname: "node-test", clientId: Uint8Array.from([1, ...MAC]) });
    expect(request!.to).toEqual({ address: "255.255.255.255", port: 67 });
    expect(request!.message.xid).toBe(discover!.message.xid);
    expect(request!.message.options).toMatchObject({ messageType: "request", requestedAddress: OFFERED, serverId: SERVER });
  });

  test("dhcp client retransmits a discover that gets no offer", async () => {
    const server = new FakeServer();
    server.dropDiscovers = 2;
    const { leases } = startClient(server);
    await eventually(() => expect(leases().length).toBeGreaterThanOrEqual(1));
    const discovers = server.discovers();
    expect(discovers).toHaveLength(3);
    // Backoff doubles: 20 ms, then 40 ms.
    expect(discovers[1]!.at - discovers[0]!.at).toBeGreaterThanOrEqual(18);
    expect(discovers[2]!.at - discovers[1]!.at).toBeGreaterThanOrEqual(38);
  });

  test("dhcp client ignores replies meant for other transactions or clients and malformed ones", async () => {
    const server = new FakeServer();
    const stranger = { ...server.reply(stubRequest(1), "offer"), yiaddr: "10.0.0.66" };
    const otherClient = { ...stranger, chaddr: Uint8Array.from([1, 2, 3, 4, 5, 6]) };
    server.noiseBeforeOffer = [new Uint8Array([1, 2, 3]), stranger, otherClient];
    const { leases } = startClient(server);
    await eventually(() => expect(leases().length).toBeGreaterThanOrEqual(1));
    expect(leases()[0]!.address).toBe(OFFERED);
    expect(server.discovers()).toHaveLength(1);
  });

  test("dhcp client starts over when its request is refused", async () => {
    const server = new FakeServer();
    server.answerRequest = "nak";
    const { leases, entries } = startClient(server);
    await eventually(() => expect(server.discovers().length).toBeGreaterThanOrEqual(2));
    server.answerRequest = "ack";
    await eventually(() => expect(leases().length).toBeGreaterThanOrEqual(1));
    expect(entries.some((e) => e.message === `could not get offered address ${OFFERED}, discovering again`)).toBe(true);
  });

  test("dhcp client renews its lease at T1 by unicast to the server", async () => {
    const server = Object.assign(new FakeServer(), LONG_LEASE);
    const { events, leases, started } = startClient(server);
    await eventually(() => expect(leases().length).toBeGreaterThanOrEqual(2));
    const renewal = server.requests((s) => s.message.ciaddr === OFFERED)[0]!;
    expect(renewal.to).toEqual({ address: SERVER, port: 67 });
    expect(renewal.message.broadcast).toBe(false);
    expect(renewal.message.options.requestedAddress).toBeUndefined();
    expect(renewal.message.options.serverId).toBeUndefined();
    expect(renewal.at - started).toBeGreaterThanOrEqual(LONG_LEASE.renewalSeconds * FAST.secondMs! - 1);
    expect(events.some((e) => e.kind === "lost")).toBe(false);
  });

  test("dhcp client rebinds by broadcast when the server does not answer renewals", async () => {
    // Renewals from 100 ms, rebinding from 3 s, expiry at 10 s: a stall of
    // this test process shorter than T2 - T1 leaves it renewing first.
    const server = Object.assign(new FakeServer(), { ...LONG_LEASE, rebindingSeconds: 300 });
    server.answerRenew = "ignore";
    const { events, leases } = startClient(server);
    await eventually(() => expect(leases().length).toBeGreaterThanOrEqual(2), { timeoutMs: 20_000 });
    // The second lease came from the first extension the server acknowledged;
    // later renewals of that lease may already be under way, so the request
    // is found by its reply, not by its place in the list.
    const extensions = server.requests((s) => s.message.ciaddr === OFFERED);
    const extended = extensions.findIndex((s) => s.reply === "ack");
    expect(extended).toBeGreaterThan(0);
    expect(extensions.slice(0, extended).map((s) => s.to)).toEqual(Array(extended).fill({ address: SERVER, port: 67 }));
    expect(extensions[extended]!.to).toEqual({ address: "255.255.255.255", port: 67 });
    expect(events.some((e) => e.kind === "lost")).toBe(false);
  }, 30_000);

  test("dhcp client gives up the address when the lease expires, then discovers again", async () => {
    const server = new FakeServer();
    server.answerRenew = "ignore";
    server.answerRebind = "ignore";
    const { events, started } = startClient(server);
    const lost = await eventually(() => events.find((e) => e.kind === "lost") ?? false);
    expect(lost).toMatchObject({ reason: "lease expired" });
    expect(lost!.at - started).toBeGreaterThanOrEqual(LEASE_SECONDS * FAST.secondMs! - 1);
    // The new lease expires in turn; only the first three events are this test's.
    await eventually(() => expect(events.slice(0, 3).map((e) => e.kind)).toEqual(["lease", "lost", "lease"]));
    expect(server.discovers().filter((s) => s.at >= lost!.at).length).toBeGreaterThanOrEqual(1);
  });

  test("dhcp client gives up the address when the server refuses a renewal", async () => {
    const server = Object.assign(new FakeServer(), LONG_LEASE);
    server.answerRenew = "nak";
    const { events } = startClient(server);
    const lost = await eventually(() => events.find((e) => e.kind === "lost") ?? false);
    expect(lost).toMatchObject({ reason: "server refused to extend the lease: address not available" });
    await eventually(() => expect(server.discovers().length).toBeGreaterThanOrEqual(2));
  });

  test("dhcp client applies a still-valid lease it starts with and renews it at once", async () => {
    const server = new FakeServer();
    const now = performance.now();
    const held: DhcpLease = {
      address: OFFERED,
      prefixLength: 24,
      routers: [SERVER],
      dnsServers: [],
      ntpServers: [],
      serverId: SERVER,
      leaseSeconds: 3600,
      renewAt: now + 1_800_000,
      rebindAt: now + 3_150_000,
      expiresAt: now + 3_600_000,
    };
    const { events, leases } = startClient(server, { lease: held });
    await eventually(() => expect(leases().length).toBeGreaterThanOrEqual(2));
    expect(events[0]).toMatchObject({ kind: "lease", lease: held });
    expect(server.sent[0]!.to.address).toBe(SERVER);
    expect(server.sent[0]!.message.ciaddr).toBe(OFFERED);
    expect(server.discovers()).toHaveLength(0);
  });

  test("dhcp client drops an expired lease it starts with and discovers", async () => {
    const server = new FakeServer();
    const past = performance.now() - 1;
    const expired: DhcpLease = {
      address: "10.0.0.7",
      prefixLength: 24,
      routers: [],
      dnsServers: [],
      ntpServers: [],
      serverId: SERVER,
      leaseSeconds: 60,
      renewAt: past,
      rebindAt: past,
      expiresAt: past,
    };
    const { events } = startClient(server, { lease: expired });
    await eventually(() => expect(events.slice(0, 2).map((e) => e.kind)).toEqual(["lost", "lease"]));
    expect(server.discovers()).toHaveLength(1);
  });

  test("dhcp client rejects with the abort reason when cancelled while waiting for an offer", async () => {
    const server = new FakeServer();
    server.dropDiscovers = Infinity;
    // The first retransmission would come long after the test's timeout, so
    // the client returns only if its wait takes the signal.
    const { controller, result } = startClient(server, { timings: { ...FAST, retransmitInitialMs: 3_600_000, retransmitMaxMs: 3_600_000 } });
    await eventually(() => expect(server.discovers().length).toBeGreaterThanOrEqual(1));
    const reason = new Error("cancelled by test");
    controller.abort(reason);
    expect(await result).toBe(reason);
    expect(server.discovers()).toHaveLength(1);
  });
});

function stubRequest(xid: number): DhcpMessage {
  return {
    op: "request",
    xid,
    secs: 0,
    broadcast: true,
    ciaddr: "0.0.0.0",
    yiaddr: "0.0.0.0",
    siaddr: "0.0.0.0",
    giaddr: "0.0.0.0",
    chaddr: MAC,
    options: { messageType: "discover" },
  };
}
