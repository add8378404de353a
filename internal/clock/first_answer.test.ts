// Reading an NTP server's reply: which replies are believed, and the offset
// and round trip they give (RFC 5905's on-wire arithmetic). A real chronyd
// answers the query in chrony.test.ts.

import { describe, expect, test } from "bun:test";
import { createSocket } from "node:dgram";
import { MAX_DELAY_MS, ntpRequest, QUERY_RESEND_MS, queryServer, readReply } from "./first_answer.ts";

const NTP_UNIX_OFFSET_S = 2_208_988_800;

/** A server reply to `request`: received at t2, sent at t3 (ms since the epoch), with these header fields. */
function reply(request: Uint8Array, t2: number, t3: number, header: { leap?: number; mode?: number; stratum?: number } = {}): Uint8Array {
  const packet = new Uint8Array(48);
  const view = new DataView(packet.buffer);
  packet[0] = ((header.leap ?? 0) << 6) | (4 << 3) | (header.mode ?? 4);
  packet[1] = header.stratum ?? 2;
  packet.set(request.subarray(40, 48), 24);
  for (const [at, ms] of [
    [32, t2],
    [40, t3],
  ] as const) {
    const seconds = Math.floor(ms / 1000);
    view.setUint32(at, seconds + NTP_UNIX_OFFSET_S);
    view.setUint32(at + 4, Math.floor(((ms - seconds * 1000) / 1000) * 2 ** 32));
  }
  return packet;
}

describe("an NTP reply", () => {
  const t1 = Date.UTC(2026, 10, 28, 4, 0, 0);
  const request = ntpRequest(t1);

  test("a request is version 4, client mode, carrying its send time", () => {
    expect(request.byteLength).toBe(48);
    expect(request[0]).toBe(0x23);
  });

  test("gives the server's offset and the round trip: a clock two hours slow, 20 ms away", () => {
    const ahead = 2 * 3600_000;
    // 10 ms out, 1 ms in the server, 10 ms back.
    const read = readReply(reply(request, t1 + ahead + 10, t1 + ahead + 11), request, t1 + 21);
    expect(read!.delayMs).toBeCloseTo(20, 0);
    expect(read!.offsetMs).toBeCloseTo(ahead, -1);
  });

  test("is not believed when it does not answer our query, comes from an unsynchronised server, or took too long", () => {
    const good = reply(request, t1 + 5, t1 + 6);
    expect(readReply(good, request, t1 + 10)).toBeDefined();
    const otherOrigin = good.slice();
    otherOrigin[31] = otherOrigin[31]! ^ 1;
    expect(readReply(otherOrigin, request, t1 + 10)).toBeUndefined();
    expect(readReply(reply(request, t1 + 5, t1 + 6, { stratum: 0 }), request, t1 + 10)).toBeUndefined(); // kiss-o'-death
    expect(readReply(reply(request, t1 + 5, t1 + 6, { stratum: 16 }), request, t1 + 10)).toBeUndefined();
    expect(readReply(reply(request, t1 + 5, t1 + 6, { leap: 3 }), request, t1 + 10)).toBeUndefined(); // not synchronised
    expect(readReply(reply(request, t1 + 5, t1 + 6, { mode: 3 }), request, t1 + 10)).toBeUndefined(); // not a server's
    expect(readReply(good.subarray(0, 47), request, t1 + 10)).toBeUndefined();
    expect(readReply(reply(request, t1 + 5, t1 + 6), request, t1 + MAX_DELAY_MS + 20)).toBeUndefined();
    expect(readReply(reply(request, t1 + 5, t1 + 6), request, t1 - 10)).toBeUndefined(); // a negative round trip
  });

  test("an exchange within our clock's millisecond is a round trip of 0, not a negative one to refuse", () => {
    // Sent and received in the same whole millisecond (Date.now()), 0.3 ms in the server.
    const read = readReply(reply(request, t1 + 0.2, t1 + 0.5), request, t1);
    expect(read).toEqual({ offsetMs: expect.closeTo(0.35, 1), delayMs: 0 });
  });
});

describe("querying a server", () => {
  test("a query that goes unanswered is sent again, with its own timestamp, and the answer to the second is taken", async () => {
    const server = createSocket("udp4");
    await new Promise<void>((resolve) => server.bind(0, "127.0.0.1", resolve));
    const seen: Uint8Array[] = [];
    server.on("message", (message, from) => {
      seen.push(new Uint8Array(message));
      // The first query is lost; the second is answered.
      if (seen.length < 2) return;
      const now = Date.now();
      server.send(reply(new Uint8Array(message), now, now), from.port, from.address);
    });
    try {
      const answer = await queryServer("127.0.0.1", { port: server.address().port, timeoutMs: 5 * QUERY_RESEND_MS });
      expect(answer?.server).toBe("127.0.0.1");
      expect(seen.length).toBeGreaterThanOrEqual(2);
      expect(Buffer.from(seen[1]!.subarray(40, 48)).equals(Buffer.from(seen[0]!.subarray(40, 48)))).toBe(false);
    } finally {
      server.close();
    }
  });
});
