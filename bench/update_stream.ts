// What an update's stream is worth at a round trip: the owner's bytes sent
// over NodeManagement.Update (real mutual TLS, this repo's rpc layer, 512 KiB
// requests as ctl sends them) through a delay line on loopback, a TCP proxy
// that holds every chunk for half the round trip each way. Once with the
// HTTP/2 default receive window (64 KiB), once with the window the node
// opens for an update (UPDATE_RECEIVE_WINDOW_BYTES, ctx.widenReceiveWindow).
// A loaded emulated node answers late: its round trip is what the window
// multiplies. Prints figures; asserts nothing.
//   bun bench/update_stream.ts [MiB]

import { Server } from "@grpc/grpc-js";
import { connect, createServer, type Socket } from "node:net";
import { NodeManagement } from "../proto/gen/api/node_management_pb.ts";
import { NODE_MANAGEMENT_POLICY, UPDATE_RECEIVE_WINDOW_BYTES } from "../internal/nodemgmt/mod.ts";
import { addService, channelCredentials, channelOptions, createClient, listen, partialService, serverCredentials } from "../internal/rpc/mod.ts";
import { testCA, testNode, testOwner } from "../internal/testing/mod.ts";
import { figure } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const MIB = 1024 * 1024;
const total = wholeNumber("MiB", benchArgs({}, { name: "MiB", default: "16", help: "MiB streamed at each round trip" }).positional) * MIB;
const CHUNK = 512 * 1024;
const ROUND_TRIPS_MS = [0, 20, 100, 200];

const ca = testCA();
const node = testNode(ca, { ipAddresses: ["127.0.0.1"] });
const owner = testOwner(ca);

/** A NodeManagement server whose Update counts the bytes it reads, widening the window first if asked. */
async function serve(widen: boolean): Promise<{ port: number; server: Server }> {
  const server = new Server();
  addService(
    server,
    NodeManagement,
    partialService(NodeManagement, {
      async *update(requests, ctx) {
        if (widen) ctx.widenReceiveWindow(UPDATE_RECEIVE_WINDOW_BYTES);
        let received = 0;
        for await (const request of requests) received += request.data.length;
        yield { writtenBytes: BigInt(received), totalBytes: BigInt(received) };
      },
    }),
    { ca: () => ca.certificate, policy: NODE_MANAGEMENT_POLICY },
  );
  const { port } = await listen(server, "127.0.0.1:0", serverCredentials({ certificate: node.certificate, privateKey: node.key.privateKey }));
  return { port, server };
}

/** A TCP proxy to `port` that delays every chunk by half of `roundTripMs`, each way, in order. */
async function delayLine(port: number, roundTripMs: number): Promise<{ port: number; close: () => void }> {
  const sockets = new Set<Socket>();
  const proxy = createServer((client) => {
    const upstream = connect(port, "127.0.0.1");
    const pipe = (from: Socket, to: Socket) => from.on("data", (data) => setTimeout(() => to.write(data), roundTripMs / 2));
    pipe(client, upstream);
    pipe(upstream, client);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => (client.destroy(), upstream.destroy()));
    }
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  return { port: (proxy.address() as { port: number }).port, close: () => (proxy.close(), sockets.forEach((s) => s.destroy())) };
}

async function* requests() {
  yield { bundleManifest: "{}" };
  const chunk = new Uint8Array(CHUNK);
  for (let sent = 0; sent < total; sent += CHUNK) yield { data: chunk };
}

/** MB/s for `total` bytes through the delay line. */
async function measure(widen: boolean, roundTripMs: number): Promise<number> {
  const { port, server } = await serve(widen);
  const line = await delayLine(port, roundTripMs);
  const client = createClient(NodeManagement, `127.0.0.1:${line.port}`, {
    credentials: channelCredentials({ server: { ca: ca.certificate, verify: () => undefined }, certificate: owner.certificate, privateKey: owner.key.privateKey }),
    channelOptions: channelOptions(node.id),
  });
  try {
    const started = performance.now();
    let received = 0n;
    for await (const answer of client.update(requests())) received = answer.writtenBytes;
    if (received !== BigInt(total)) throw new Error(`the server read ${received} of ${total} bytes`);
    return total / 1e6 / ((performance.now() - started) / 1000);
  } finally {
    client.close();
    line.close();
    server.forceShutdown();
  }
}

console.log(`NodeManagement.Update, ${total / MIB} MiB in 512 KiB requests, through a delay line on loopback (${navigator.hardwareConcurrency} cores, ${new Date().toISOString()})`);
for (const roundTripMs of ROUND_TRIPS_MS) {
  const narrow = await measure(false, roundTripMs);
  const wide = await measure(true, roundTripMs);
  figure(`round trip ${roundTripMs} ms: 64 KiB window | ${UPDATE_RECEIVE_WINDOW_BYTES / MIB} MiB window`, `${narrow.toFixed(2)} | ${wide.toFixed(2)} MB/s`, 60);
}
