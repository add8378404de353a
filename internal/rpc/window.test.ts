// The receive window a handler opens for a caller that sends bulk data
// (CallContext.widenReceiveWindow), on a real HTTP/2 session: the
// connection's window now, and every stream's through SETTINGS, which the
// peer acknowledges. bench/update_stream.ts shows what it is worth.

import { expect, test } from "bun:test";
import { connect, createServer, type ServerHttp2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { MAX_RECEIVE_WINDOW_BYTES, widenWindow } from "./service.ts";

async function sessionPair() {
  const server = createServer();
  const sessions: ServerHttp2Session[] = [];
  const accepted = new Promise<ServerHttp2Session>((resolve) => server.on("session", (s) => (sessions.push(s), resolve(s))));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const client = connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  const session = await accepted;
  await new Promise((resolve) => session.once("localSettings", resolve));
  return {
    session,
    [Symbol.asyncDispose]: async () => {
      client.close();
      for (const s of sessions) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

test("a widened window is the connection's and every stream's, and is acknowledged by the peer", async () => {
  await using pair = await sessionPair();
  expect(pair.session.state.localWindowSize).toBe(65_535);
  const acknowledged = new Promise((resolve) => pair.session.once("localSettings", resolve));
  widenWindow(pair.session, 8 * 1024 * 1024);
  expect(pair.session.state.localWindowSize).toBe(8 * 1024 * 1024);
  await acknowledged;
  expect(pair.session.localSettings.initialWindowSize).toBe(8 * 1024 * 1024);
});

test("a window is never widened past the bound, nor narrowed", async () => {
  await using pair = await sessionPair();
  widenWindow(pair.session, 10 * MAX_RECEIVE_WINDOW_BYTES);
  expect(pair.session.state.localWindowSize).toBe(MAX_RECEIVE_WINDOW_BYTES);
  widenWindow(pair.session, 1024);
  expect(pair.session.state.localWindowSize).toBe(MAX_RECEIVE_WINDOW_BYTES);
});
