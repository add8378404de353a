// Netlink: how the node creates links, routes and WireGuard devices without
// iproute2 or wireguard-tools (the image has neither). One request at a
// time on a socket of its own; the kernel handles a request inside
// sendto(2), so its answer is queued before sendto returns and is read
// without blocking (MSG_DONTWAIT): PID 1's event loop never waits here.
//
//   message   = nlmsghdr (16 bytes: len u32, type u16, flags u16, seq u32, pid u32)
//               + the family's header (ifinfomsg, rtmsg, genlmsghdr) + attributes
//   attribute = len u16, type u16 (NLA_F_NESTED for nested ones), payload, padded to 4
//
// All numbers are in host byte order (little endian here) except where the
// kernel says otherwise (addresses, ports in sockaddr_in).

import { bind, close, recvfrom, sendto, socket, SOCK_CLOEXEC, MSG_DONTWAIT, EAGAIN, SyscallError } from "../sys/mod.ts";

export const AF_NETLINK = 16;
const SOCK_RAW = 3;
export const NETLINK_ROUTE = 0;
export const NETLINK_GENERIC = 16;

export const NLM_F_REQUEST = 0x1;
export const NLM_F_ACK = 0x4;
export const NLM_F_ROOT = 0x100;
export const NLM_F_MATCH = 0x200;
export const NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH;
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
export const NLA_F_NESTED = 0x8000;
const NLA_TYPE_MASK = 0x3fff;

/** A failed netlink request: the kernel's errno, named, with what was asked. */
export class NetlinkError extends Error {
  override name = "NetlinkError";
  constructor(
    readonly what: string,
    readonly errno: number,
  ) {
    super(`${what}: ${new SyscallError("netlink", errno).message.replace(/^netlink: /, "")}`);
  }
}

const pad4 = (n: number) => (n + 3) & ~3;

/** An attribute: type and payload (raw bytes, or nested attributes). */
export interface Attribute {
  type: number;
  value: Uint8Array | Attribute[];
}

export const attr = {
  bytes: (type: number, value: Uint8Array): Attribute => ({ type, value }),
  u8: (type: number, value: number): Attribute => ({ type, value: Uint8Array.of(value) }),
  u16: (type: number, value: number): Attribute => {
    const b = new Uint8Array(2);
    new DataView(b.buffer).setUint16(0, value, true);
    return { type, value: b };
  },
  u32: (type: number, value: number): Attribute => {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, value, true);
    return { type, value: b };
  },
  /** A NUL-terminated string. */
  string: (type: number, value: string): Attribute => ({ type, value: new TextEncoder().encode(`${value}\0`) }),
  nested: (type: number, value: Attribute[]): Attribute => ({ type: type | NLA_F_NESTED, value }),
};

/** Attributes as bytes, each padded to 4. */
export function encodeAttributes(attributes: readonly Attribute[]): Uint8Array {
  const parts = attributes.map((a) => {
    const payload = a.value instanceof Uint8Array ? a.value : encodeAttributes(a.value);
    const out = new Uint8Array(pad4(4 + payload.length));
    const view = new DataView(out.buffer);
    view.setUint16(0, 4 + payload.length, true);
    view.setUint16(2, a.type, true);
    out.set(payload, 4);
    return out;
  });
  return concat(parts);
}

/** Attributes read from bytes: type (flags masked off) → payloads, in order. */
export function decodeAttributes(bytes: Uint8Array): Map<number, Uint8Array[]> {
  const out = new Map<number, Uint8Array[]>();
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  while (at + 4 <= bytes.length) {
    const length = view.getUint16(at, true);
    if (length < 4 || at + length > bytes.length) break;
    const type = view.getUint16(at + 2, true) & NLA_TYPE_MASK;
    const list = out.get(type) ?? [];
    list.push(bytes.subarray(at + 4, at + length));
    out.set(type, list);
    at += pad4(length);
  }
  return out;
}

export function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** One netlink message: its header fields and what follows the header. */
export interface Message {
  type: number;
  flags: number;
  payload: Uint8Array;
}

/** A message as bytes, with `seq`. */
export function encodeMessage(message: Message, seq: number): Uint8Array {
  const out = new Uint8Array(pad4(16 + message.payload.length));
  const view = new DataView(out.buffer);
  view.setUint32(0, 16 + message.payload.length, true);
  view.setUint16(4, message.type, true);
  view.setUint16(6, message.flags, true);
  view.setUint32(8, seq, true);
  view.setUint32(12, 0, true);
  out.set(message.payload, 16);
  return out;
}

/** The messages in one datagram. */
export function decodeMessages(bytes: Uint8Array): (Message & { seq: number })[] {
  const out: (Message & { seq: number })[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  while (at + 16 <= bytes.length) {
    const length = view.getUint32(at, true);
    if (length < 16 || at + length > bytes.length) break;
    out.push({ type: view.getUint16(at + 4, true), flags: view.getUint16(at + 6, true), seq: view.getUint32(at + 8, true), payload: bytes.subarray(at + 16, at + length) });
    at += pad4(length);
  }
  return out;
}

/** A netlink socket of one protocol (NETLINK_ROUTE, NETLINK_GENERIC); close() it when done. */
export class NetlinkSocket {
  private readonly fd: number;
  private seq = 1;
  private readonly buffer = new Uint8Array(64 * 1024);

  constructor(protocol: number) {
    this.fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
    try {
      bind(this.fd, sockaddrNl());
    } catch (err) {
      close(this.fd);
      throw err;
    }
  }

  /**
   * Sends one request and returns the messages that answer it (for a dump,
   * all of them up to NLMSG_DONE; for NLM_F_ACK, none once acknowledged).
   * A negative acknowledgement throws NetlinkError naming `what`.
   */
  request(what: string, message: Message): Message[] {
    const seq = this.seq++;
    const sent = sendto(this.fd, encodeMessage(message, seq), 0, sockaddrNl());
    if (sent.result < 0) throw new NetlinkError(what, sent.errno);
    const dump = (message.flags & NLM_F_DUMP) === NLM_F_DUMP;
    const acked = (message.flags & NLM_F_ACK) !== 0;
    const answers: Message[] = [];
    const from = sockaddrNl();
    const fromLength = Uint32Array.of(from.length);
    for (;;) {
      const got = recvfrom(this.fd, this.buffer, MSG_DONTWAIT, from, fromLength);
      if (got.result < 0) {
        // Nothing more queued: a request that is neither a dump nor acknowledged has its answer already.
        if (got.errno === EAGAIN && !dump && !acked && answers.length > 0) return answers;
        throw new NetlinkError(`${what} (reading the answer)`, got.errno);
      }
      for (const reply of decodeMessages(this.buffer.subarray(0, got.result))) {
        if (reply.seq !== seq) continue;
        if (reply.type === NLMSG_ERROR) {
          const errno = -new DataView(reply.payload.buffer, reply.payload.byteOffset).getInt32(0, true);
          if (errno !== 0) throw new NetlinkError(what, errno);
          return answers; // the acknowledgement
        }
        if (reply.type === NLMSG_DONE) return answers;
        // A copy: the buffer is read into again for the rest of the answer.
        answers.push({ type: reply.type, flags: reply.flags, payload: reply.payload.slice() });
        if (!dump && !acked) return answers;
      }
    }
  }

  close(): void {
    close(this.fd);
  }
}

/** struct sockaddr_nl for the kernel (pid 0, no groups). */
function sockaddrNl(): Uint8Array {
  const b = new Uint8Array(12);
  new DataView(b.buffer).setUint16(0, AF_NETLINK, true);
  return b;
}

/** Runs `work` with a socket of `protocol`, closed after. */
export function withNetlink<T>(protocol: number, work: (socket: NetlinkSocket) => T): T {
  const s = new NetlinkSocket(protocol);
  try {
    return work(s);
  } finally {
    s.close();
  }
}
