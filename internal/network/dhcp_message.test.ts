import { describe, expect, test } from "bun:test";
import { decodeDhcpMessage, DhcpDecodeError, DHCP_HEADER_LENGTH, DHCP_MIN_MESSAGE_LENGTH, encodeDhcpMessage, type DhcpMessage } from "./dhcp_message.ts";

const MAC = Uint8Array.from([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
const COOKIE = [99, 130, 83, 99];

function discover(overrides: Partial<DhcpMessage> = {}): DhcpMessage {
  return {
    op: "request",
    xid: 0xdeadbeef,
    secs: 3,
    broadcast: true,
    ciaddr: "0.0.0.0",
    yiaddr: "0.0.0.0",
    siaddr: "0.0.0.0",
    giaddr: "0.0.0.0",
    chaddr: MAC,
    options: { messageType: "discover", parameterRequestList: [1, 3, 6, 51, 54], clientId: Uint8Array.from([1, ...MAC]) },
    ...overrides,
  };
}

/** A server reply written byte by byte, as a server would put it on the wire. */
function rawReply(options: number[], header: { xid?: number; yiaddr?: number[]; file?: number[]; sname?: number[] } = {}): Uint8Array {
  const out = new Uint8Array(DHCP_HEADER_LENGTH + 4 + options.length);
  out[0] = 2; // BOOTREPLY
  out[1] = 1;
  out[2] = 6;
  new DataView(out.buffer).setUint32(4, header.xid ?? 0x01020304);
  out.set(header.yiaddr ?? [10, 0, 0, 42], 16);
  out.set([10, 0, 0, 1], 20);
  out.set(MAC, 28);
  if (header.sname) out.set(header.sname, 44);
  if (header.file) out.set(header.file, 108);
  out.set(COOKIE, DHCP_HEADER_LENGTH);
  out.set(options, DHCP_HEADER_LENGTH + 4);
  return out;
}

describe("dhcp message encoding", () => {
  test("a discover has the BOOTP header, the magic cookie and its options on the wire", () => {
    const bytes = encodeDhcpMessage(discover());
    expect(bytes.byteLength).toBe(DHCP_MIN_MESSAGE_LENGTH);
    expect([...bytes.subarray(0, 4)]).toEqual([1, 1, 6, 0]); // BOOTREQUEST, ethernet, hlen 6, hops 0
    expect([...bytes.subarray(4, 8)]).toEqual([0xde, 0xad, 0xbe, 0xef]);
    expect([...bytes.subarray(8, 12)]).toEqual([0, 3, 0x80, 0]); // secs 3, broadcast flag
    expect([...bytes.subarray(28, 34)]).toEqual([...MAC]);
    expect([...bytes.subarray(DHCP_HEADER_LENGTH, DHCP_HEADER_LENGTH + 4)]).toEqual(COOKIE);
    // Message type comes first, then options by code, then end.
    const options = [...bytes.subarray(DHCP_HEADER_LENGTH + 4, DHCP_HEADER_LENGTH + 4 + 20)];
    expect(bytes.subarray(DHCP_HEADER_LENGTH + 4 + 20).every((b) => b === 0)).toBe(true); // padding
    expect(options).toEqual([53, 1, 1, 55, 5, 1, 3, 6, 51, 54, 61, 7, 1, ...MAC, 255]);
  });

  test("a message survives an encode and decode round trip", () => {
    const message = discover({
      op: "reply",
      broadcast: false,
      ciaddr: "10.1.2.3",
      yiaddr: "10.1.2.4",
      siaddr: "10.1.2.5",
      giaddr: "10.1.2.6",
      options: {
        messageType: "ack",
        subnetMask: "255.255.254.0",
        routers: ["10.1.2.1", "10.1.2.254"],
        dnsServers: ["10.1.2.53"],
        hostname: "node-1",
        domainName: "cluster.internal",
        requestedAddress: "10.1.2.4",
        leaseSeconds: 86_400,
        serverId: "10.1.2.5",
        message: "ok",
        maxMessageSize: 1500,
        renewalSeconds: 40_000,
        rebindingSeconds: 70_000,
        clientId: Uint8Array.from([1, ...MAC]),
        parameterRequestList: [1, 3],
      },
    });
    expect(decodeDhcpMessage(encodeDhcpMessage(message))).toEqual(message);
  });

  test("an option longer than 255 bytes is split and joined again", () => {
    const dnsServers = Array.from({ length: 100 }, (_, i) => `10.0.${i}.1`);
    const bytes = encodeDhcpMessage(discover({ options: { messageType: "offer", dnsServers } }));
    expect(bytes.byteLength).toBeGreaterThan(DHCP_MIN_MESSAGE_LENGTH);
    expect(decodeDhcpMessage(bytes).options.dnsServers).toEqual(dnsServers);
  });
});

describe("dhcp message decoding", () => {
  test("an offer from a server decodes into its address and options", () => {
    const message = decodeDhcpMessage(
      rawReply([
        53,
        1,
        2, // offer
        54,
        4,
        10,
        0,
        0,
        1, // server id
        51,
        4,
        0,
        0,
        0x0e,
        0x10, // lease 3600 s
        1,
        4,
        255,
        255,
        255,
        0, // subnet mask
        3,
        4,
        10,
        0,
        0,
        1, // router
        6,
        8,
        10,
        0,
        0,
        53,
        10,
        0,
        0,
        54, // two DNS servers
        12,
        7,
        ...new TextEncoder().encode("node-7"),
        0, // hostname, NUL-terminated by a sloppy server
        0,
        0, // pad
        200,
        2,
        9,
        9, // an unknown option
        255,
      ]),
    );
    expect(message.op).toBe("reply");
    expect(message.xid).toBe(0x01020304);
    expect(message.yiaddr).toBe("10.0.0.42");
    expect(message.siaddr).toBe("10.0.0.1");
    expect([...message.chaddr]).toEqual([...MAC]);
    expect(message.options).toEqual({
      messageType: "offer",
      serverId: "10.0.0.1",
      leaseSeconds: 3600,
      subnetMask: "255.255.255.0",
      routers: ["10.0.0.1"],
      dnsServers: ["10.0.0.53", "10.0.0.54"],
      hostname: "node-7",
    });
  });

  test("options overloaded into the file and sname fields are read", () => {
    const message = decodeDhcpMessage(rawReply([53, 1, 5, 52, 1, 3, 255], { file: [3, 4, 10, 0, 0, 1, 255], sname: [6, 4, 10, 0, 0, 53, 255] }));
    expect(message.options).toEqual({ messageType: "ack", routers: ["10.0.0.1"], dnsServers: ["10.0.0.53"] });
  });

  test("a message without an end option is read to its last byte", () => {
    expect(decodeDhcpMessage(rawReply([53, 1, 6])).options).toEqual({ messageType: "nak" });
  });

  test("malformed messages are rejected with the reason", () => {
    const cases: [Uint8Array, string][] = [
      [new Uint8Array(100), "message of 100 bytes is shorter than a DHCP header"],
      [
        (() => {
          const m = rawReply([255]);
          m[0] = 7;
          return m;
        })(),
        "unknown op 7",
      ],
      [
        (() => {
          const m = rawReply([255]);
          m[DHCP_HEADER_LENGTH] = 0;
          return m;
        })(),
        "missing DHCP magic cookie",
      ],
      [rawReply([3, 9, 1, 2]), "option 3 in options runs past the end of the message"],
      [rawReply([3, 5, 10, 0, 0, 1, 0, 255]), "option 3 (router) has length 5, want a multiple of 4"],
      [rawReply([1, 3, 255, 255, 0, 255]), "option 1 (subnetMask) has length 3, want 4"],
      [rawReply([53, 1, 9, 255]), "unknown message type 9"],
    ];
    for (const [bytes, reason] of cases) {
      expect(() => decodeDhcpMessage(bytes)).toThrow(new DhcpDecodeError(reason));
    }
  });
});
