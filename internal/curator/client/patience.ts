// How long to wait for a curator's connection: short for a curator that is
// gone, longer for one that is only busy.
//
//   client.connect(CONNECT_TIMEOUT_MS)
//     ready / failed            → that is the answer
//     still connecting at PROBE_AFTER of the deadline
//       → a bare TCP connection to the same address (no bytes sent, closed
//         at once) tells a host that is there from one that is not:
//           no answer by the deadline → "timeout" (powered off, cut off)
//           accepted                  → the host is up and its curator is
//                                       slow to finish the TLS handshake:
//                                       wait until CONNECT_PATIENCE_MS
//
// Why: the kernel accepts a TCP connection however busy its user space is,
// and a curator whose node is starting a Kubernetes apiserver under
// software emulation may take longer than the connect deadline for its TLS
// handshake. Giving up on it then made ctl report "no curator answered"
// for a cluster that was there. A curator that is gone still fails within
// the deadline, so failover (pool.ts) is as fast as before.

import { connect as tcpConnect } from "node:net";
import type { ConnectResult } from "../../rpc/mod.ts";
import type { CuratorEndpoint } from "./endpoint.ts";

/** How long a host that accepts TCP connections gets to finish the TLS handshake, all told. */
export const CONNECT_PATIENCE_MS = 15_000;
/** The share of the connect deadline after which a connection still not up is probed. */
const PROBE_AFTER = 0.5;

/** How a connect with patience ended; `accepted` says that the host took a bare TCP connection. */
export type PatientResult = { result: "ready" | "failed" } | { result: "timeout"; timeoutMs: number; accepted: boolean };

/**
 * Connects within `timeoutMs`, or within `patienceMs` (never shorter) when
 * the endpoint's host is seen to accept TCP connections; see the file
 * comment. `waiting` is told when the wait is extended.
 */
export async function connectPatiently(
  connect: (timeoutMs: number) => Promise<ConnectResult>,
  endpoint: Pick<CuratorEndpoint, "host" | "port">,
  timeoutMs: number,
  patienceMs = CONNECT_PATIENCE_MS,
  waiting?: () => void,
): Promise<PatientResult> {
  const started = Date.now();
  let probe: Promise<boolean> | undefined;
  const timer = setTimeout(() => (probe = acceptsConnections(endpoint, timeoutMs - (Date.now() - started))), timeoutMs * PROBE_AFTER);
  const first = await connect(timeoutMs).finally(() => clearTimeout(timer));
  if (first !== "timeout") return { result: first };
  const accepted = probe !== undefined && (await probe);
  const left = patienceMs - (Date.now() - started);
  if (!accepted || left <= 0) return { result: "timeout", timeoutMs, accepted };
  waiting?.();
  const second = await connect(left);
  if (second !== "timeout") return { result: second };
  return { result: "timeout", timeoutMs: Math.max(patienceMs, timeoutMs), accepted: true };
}

/** Whether a bare TCP connection to `endpoint` is accepted within `timeoutMs`; it is closed at once. */
export function acceptsConnections(endpoint: Pick<CuratorEndpoint, "host" | "port">, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: endpoint.host, port: endpoint.port });
    const done = (accepted: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(accepted);
    };
    const timer = setTimeout(() => done(false), Math.max(timeoutMs, 0));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}
