// The boot's first step of the clock: one NTP query (RFC 5905's client
// mode, as SNTP asks it, RFC 4330) to the node's time servers, in order,
// before chronyd starts.
//
// chronyd with iburst selects a source after four exchanges two seconds
// apart: a boot waited 4.5 s for it (issue 47) before its first TLS
// handshake. One answer is enough to set a clock that is minutes or hours
// off to within the round trip, which is all a certificate check needs.
// chronyd then takes over and disciplines the clock as before; what it
// later says replaces this answer on the "time" line.
//
// The answer is believed only if it answers our query (its origin
// timestamp is the transmit timestamp we sent, which nobody else saw), it
// comes from a synchronised server (stratum 1-15, leap indicator not 3),
// and its round trip is below MAX_DELAY_MS.

import { createSocket } from "node:dgram";
import { isIPv6 } from "node:net";

/** NTP's port. */
export const NTP_PORT = 123;
/** How long one server gets to answer. */
export const QUERY_TIMEOUT_MS = 1_000;
/** A server not answered yet is asked again this often within the timeout (a query or its answer lost is UDP's lot). */
export const QUERY_RESEND_MS = 250;
/** The resolution of the times we take (Date.now()). */
const CLOCK_RESOLUTION_MS = 1;
/** An answer whose round trip took longer than this is not used: the offset could be off by half of it. */
export const MAX_DELAY_MS = 500;
/** Seconds from 1900 (NTP's era 0) to 1970. */
const NTP_UNIX_OFFSET_S = 2_208_988_800;
const PACKET_BYTES = 48;

export interface FirstAnswer {
  server: string;
  /** How far the server's clock is ahead of ours, in ms. */
  offsetMs: number;
  /** The round trip, in ms. */
  delayMs: number;
}

/** Writes `ms` since the epoch as an NTP timestamp at `at`. */
function writeTimestamp(view: DataView, at: number, ms: number): void {
  const seconds = Math.floor(ms / 1000);
  view.setUint32(at, seconds + NTP_UNIX_OFFSET_S);
  view.setUint32(at + 4, Math.floor(((ms - seconds * 1000) / 1000) * 2 ** 32));
}

/** Reads an NTP timestamp at `at` as ms since the epoch (era 0, which lasts until 2036). */
function readTimestamp(view: DataView, at: number): number {
  return (view.getUint32(at) - NTP_UNIX_OFFSET_S) * 1000 + (view.getUint32(at + 4) / 2 ** 32) * 1000;
}

/** A client-mode request (version 4, mode 3) whose transmit timestamp is `sentMs`. */
export function ntpRequest(sentMs: number): Uint8Array {
  const packet = new Uint8Array(PACKET_BYTES);
  const view = new DataView(packet.buffer);
  packet[0] = (0 << 6) | (4 << 3) | 3;
  writeTimestamp(view, 40, sentMs);
  return packet;
}

/**
 * The offset and round trip from a server's reply to the request sent at
 * `sentMs` (the exact timestamp in the request) and received at
 * `receivedMs`; undefined when the reply is not one to believe (see the
 * top of the file).
 */
export function readReply(reply: Uint8Array, request: Uint8Array, receivedMs: number, maxDelayMs = MAX_DELAY_MS): { offsetMs: number; delayMs: number } | undefined {
  if (reply.byteLength < PACKET_BYTES) return undefined;
  const view = new DataView(reply.buffer, reply.byteOffset, reply.byteLength);
  const leap = reply[0]! >> 6;
  const mode = reply[0]! & 7;
  const stratum = reply[1]!;
  if (mode !== 4 || leap === 3 || stratum < 1 || stratum > 15) return undefined;
  // The origin timestamp must be the transmit timestamp we sent, bit for bit.
  for (let i = 0; i < 8; i++) if (reply[24 + i] !== request[40 + i]) return undefined;
  const t1 = readTransmitMs(request);
  const t2 = readTimestamp(view, 32);
  const t3 = readTimestamp(view, 40);
  const t4 = receivedMs;
  // Our two times are whole milliseconds (Date.now()): an exchange within
  // one millisecond can come out up to 1 ms below zero, and is a round trip
  // of about nothing, not a reply to refuse.
  const delayMs = t4 - t1 - (t3 - t2);
  if (!(delayMs >= -CLOCK_RESOLUTION_MS && delayMs <= maxDelayMs)) return undefined;
  return { offsetMs: (t2 - t1 + (t3 - t4)) / 2, delayMs: Math.max(0, delayMs) };
}

export interface QueryOptions {
  port?: number;
  timeoutMs?: number;
  /** The longest round trip believed (MAX_DELAY_MS). */
  maxDelayMs?: number;
  signal?: AbortSignal;
}

/**
 * Queries one server, again every QUERY_RESEND_MS until it answers (each
 * query with its own transmit timestamp, each answer matched to its own);
 * undefined if no answer to believe came within timeoutMs.
 */
export async function queryServer(server: string, options: QueryOptions = {}): Promise<FirstAnswer | undefined> {
  const socket = createSocket(isIPv6(server) ? "udp6" : "udp4");
  const timeoutMs = options.timeoutMs ?? QUERY_TIMEOUT_MS;
  let resend: ReturnType<typeof setInterval> | undefined;
  try {
    return await new Promise<FirstAnswer | undefined>((resolve) => {
      const done = (answer: FirstAnswer | undefined) => {
        clearTimeout(timer);
        clearInterval(resend);
        options.signal?.removeEventListener("abort", onAbort);
        resolve(answer);
      };
      const onAbort = () => done(undefined);
      const timer = setTimeout(() => done(undefined), timeoutMs);
      options.signal?.addEventListener("abort", onAbort, { once: true });
      const requests: Uint8Array[] = [];
      socket.on("error", () => done(undefined));
      socket.on("message", (message) => {
        const receivedMs = Date.now();
        for (const request of requests) {
          const read = readReply(new Uint8Array(message), request, receivedMs, options.maxDelayMs);
          if (read) return done({ server, ...read });
        }
      });
      const ask = () => {
        // Distinct transmit timestamps, so that each answer names its query.
        const request = ntpRequest(Math.max(Date.now(), (requests.length && readTransmitMs(requests.at(-1)!)) + 1));
        requests.push(request);
        // A host name is resolved by the socket; a failed lookup is an error, and no answer.
        socket.send(request, options.port ?? NTP_PORT, server, (error) => error && done(undefined));
      };
      ask();
      resend = setInterval(ask, QUERY_RESEND_MS);
    });
  } finally {
    socket.close();
  }
}

/** The transmit timestamp of one of our requests, in ms since the epoch. */
function readTransmitMs(request: Uint8Array): number {
  return readTimestamp(new DataView(request.buffer, request.byteOffset, request.byteLength), 40);
}

/**
 * The first answer to believe from any of `servers`, asked all at once, so
 * that a dead server costs nothing; undefined if none gave one within the
 * timeout.
 */
export async function firstAnswer(servers: readonly string[], options: QueryOptions = {}): Promise<FirstAnswer | undefined> {
  const stop = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
  try {
    return await new Promise<FirstAnswer | undefined>((resolve) => {
      let pending = servers.length;
      if (pending === 0) resolve(undefined);
      for (const server of servers) {
        void queryServer(server, { ...options, signal }).then((answer) => {
          pending--;
          if (answer) resolve(answer);
          else if (pending === 0) resolve(undefined);
        });
      }
    });
  } finally {
    stop.abort();
  }
}
