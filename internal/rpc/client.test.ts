import { describe, expect, test } from "bun:test";
import { credentials } from "@grpc/grpc-js";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { channelCredentials, channelOptions, createClient } from "./mod.ts";

/** A loopback port nothing listens on: taken, then freed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Keeps the event loop from running anything for `ms`, as a loaded machine or a long synchronous step does. */
function blockLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

describe("connect", () => {
  test("a refused connection is a failure, also when the loop was blocked past the deadline", async () => {
    const port = await closedPort();
    // Blocked at once (before the connection is even tried), and blocked
    // while the refusal waits to be read: either way the deadline's timer
    // is due before the socket is read.
    for (const block of [(run: () => void) => run(), (run: () => void) => setTimeout(run, 5)]) {
      const client = createClient(Management, `127.0.0.1:${port}`, { credentials: credentials.createInsecure() });
      try {
        const connecting = client.connect(100);
        block(() => blockLoop(300));
        expect(await connecting).toBe("failed");
      } finally {
        client.close();
      }
    }
  });

  test("a server that takes the connection and never answers the handshake is a timeout, loop blocked or not", async () => {
    const sockets: Socket[] = [];
    const server = createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const target = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      for (const block of [() => {}, () => setTimeout(() => blockLoop(300), 5)]) {
        const client = createClient(Management, target, { credentials: channelCredentials({ server: "unverified" }), channelOptions: channelOptions() });
        try {
          const connecting = client.connect(100);
          block();
          expect(await connecting).toBe("timeout");
        } finally {
          client.close();
        }
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      server.close();
    }
  });
});
