// Test driver, run by listener.test.ts: a bounded gRPC server (listen())
// whose process stops running for a while at a chosen moment of each
// connection, as a node's does on a starved CPU. It must be a process of
// its own: the test's client has to keep running while this one is away.
//
// Reads one JSON line on stdin: the serving identity and the CA (PEM), the
// listener's limits, and when to stall ("accept": as the connection comes
// in, before the handshake; "handshake": as soon as the handshake is done,
// before the first call is read; "call": inside the call's handler, with
// the call let in and the client waiting), for how long, and after how many
// connections (or calls) that are not stalled. Prints {"port": N},
// then, on each further stdin line, the listener's counters as one JSON line.
//
//   bun starved_server_driver.ts < config.json

import { createPrivateKey, X509Certificate } from "node:crypto";
import { createInterface } from "node:readline";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { addService, createServer, listen, partialService, serverCredentials, vouchedUnder, type ListenLimits, type ServicePolicy } from "./mod.ts";

export interface StarvedServerConfig {
  ca: string;
  certificate: string;
  privateKey: string;
  limits: ListenLimits;
  /** Connections not stalled first (to let a call make the source known), then every later one. */
  stall: { at: "accept" | "handshake" | "call"; ms: number; skip?: number };
  /** Vouch for the cluster's certificates (clusterListenLimits). */
  vouch?: boolean;
}

/** The process does nothing else for `ms`: no timer runs, no socket is read. */
function away(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const config = JSON.parse((await lines.next()).value as string) as StarvedServerConfig;
const ca = new X509Certificate(config.ca);
const server = createServer();
const policy = Object.fromEntries(Management.methods.map((method) => [method.localName, "owner"])) as ServicePolicy<typeof Management>;
let calls = 0;
const getRegisterTicket = async () => {
  if (config.stall.at === "call" && ++calls > (config.stall.skip ?? 0)) away(config.stall.ms);
  return { ticket: new Uint8Array([7]) };
};
addService(server, Management, partialService(Management, { getRegisterTicket }), { ca: () => ca, policy });
const credentials = serverCredentials({ certificate: new X509Certificate(config.certificate), privateKey: createPrivateKey(config.privateKey) });
const { port, counters } = await listen(server, "127.0.0.1:0", credentials, config.vouch ? { ...config.limits, vouch: vouchedUnder(() => ca) } : config.limits);
const http2Servers = [...(server as unknown as { http2Servers: Map<{ on(event: string, listener: () => void): void }, unknown> }).http2Servers.keys()];
let connections = 0;
for (const listener of http2Servers) {
  if (config.stall.at === "call") continue;
  listener.on(config.stall.at === "accept" ? "connection" : "secureConnection", () => {
    if (++connections > (config.stall.skip ?? 0)) away(config.stall.ms);
  });
}
process.stdout.write(JSON.stringify({ port }) + "\n");
for await (const _ of { [Symbol.asyncIterator]: () => lines }) process.stdout.write(JSON.stringify(counters) + "\n");
server.forceShutdown();
