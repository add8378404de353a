// The owner's calls while a node process is flooded, each flood the way the
// outside test of 2026-11-27 ran it (issue 45), all at once and kept up
// (each flooder opens a new connection when the node drops one):
//  - HTTP/1.1 on the node management port, a header trickled a byte at a time;
//  - HTTP/2 on the curator port that answers pings and never calls;
//  - stalled handshakes (a ClientHello cut short) from addresses that each
//    finished one anonymous handshake first;
//  - scrapes without a certificate, refused and reported, from many addresses;
//  - the owner's own scrapes, as fast as they come back.
// Meanwhile the owner labels the node ten times with ctl: every call
// succeeds, and every one is in the audit trail (ctl events).

import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { connect as http2Connect } from "node:http2";
import { request as httpsRequest } from "node:https";
import { connect as tcpConnect } from "node:net";
import { join } from "node:path";
import { connect as tlsConnect, type ConnectionOptions } from "node:tls";
import { CURATOR_PORT } from "../internal/curator/client/mod.ts";
import { NODE_MANAGEMENT_PORT } from "../internal/nodemgmt/client/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode } from "./support/node_process.ts";

const dir = tempDir("nodecore-floods-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(41));
const { ctl, bootstrap } = ownedNode(node, dir.path);
let flooding = true;
const closers: (() => void)[] = [];
/** The most lines the refused scrapes may take in the audit trail: a bounded few and a count, not one per refusal. */
const REFUSAL_LINES_BOUND = 40;

afterAll(async () => {
  flooding = false;
  for (const close of closers.splice(0)) close();
  await node.stop();
  dir[Symbol.dispose]();
}, 60_000);

/** Keeps `count` connections open from `from`, each made by `open`; a dropped one is made again while the flood lasts. Returns how many were dropped. */
function keepOpen(count: number, open: () => { close: () => void; onClose: (fn: () => void) => void }): () => number {
  let dropped = 0;
  const one = () => {
    if (!flooding) return;
    const connection = open();
    closers.push(connection.close);
    connection.onClose(() => {
      dropped++;
      setTimeout(one, 200);
    });
  };
  for (let i = 0; i < count; i++) one();
  return () => dropped;
}

const anonymous = (servername: string): ConnectionOptions => ({ ca: readFileSync(join(dir.path, "ctl", "ca.crt"), "utf8"), servername, checkServerIdentity: () => undefined });

test("the owner's ten writes succeed and are audited while idle HTTP/1.1 and HTTP/2, stalled handshakes from once-anonymous sources, refused scrapes from many addresses and the owner's own scrapes flood the node", async () => {
  const up = await bootstrap();
  const id = String(up.node);
  const host = node.address;
  // The owner has called from here (127.0.0.1) before the floods: a known source.
  expect((await ctl("node", "list")).code).toBe(0);
  const tls = anonymous(id);

  // A scrape of /metrics from `localAddress`, with the owner's certificate or none; its HTTP status, 0 if the node dropped it.
  const scrape = (localAddress: string, cert?: { cert: string; key: string }) =>
    new Promise<number>((resolve) => {
      const request = httpsRequest({ host, port: NODE_MANAGEMENT_PORT, path: "/metrics", localAddress, ...tls, ...cert, agent: false } as never, (response) => {
        response.resume();
        response.on("end", () => resolve(response.statusCode ?? 0));
      });
      request.on("error", () => resolve(0));
      request.setTimeout(20_000, () => request.destroy());
      request.end();
    });
  // Before the floods, scrapes without a certificate from 100 addresses reach the
  // node and are refused (401); the audit trail must hold them as a bounded few.
  // A stranger whose ClientHello is not heard within 3 s is dropped (0): under
  // the parallel suite's load some are (7 of 100 in one run); none is answered,
  // and more are refused than the trail's bound, so that the bound is tested.
  const before: number[] = [];
  for (let round = 0; round < 5; round++) before.push(...(await Promise.all(Array.from({ length: 20 }, (_, i) => scrape(`127.0.12.${round * 20 + i + 1}`)))));
  expect(before.filter((status) => status !== 401 && status !== 0)).toEqual([]);
  expect(before.filter((status) => status === 401).length).toBeGreaterThan(REFUSAL_LINES_BOUND);

  // HTTP/1.1, trickled: 4 sources x 300 on node management.
  const trickles = [1, 2, 3, 4].map((n) =>
    keepOpen(300, () => {
      const socket = tlsConnect({ port: NODE_MANAGEMENT_PORT, host, localAddress: `127.0.9.${n}`, ...tls, ALPNProtocols: ["http/1.1"] } as ConnectionOptions);
      socket.on("error", () => {});
      const header = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
      let sent = 0;
      const drip = setInterval(() => sent < header.length && !socket.destroyed && socket.write(header[sent++]!), 2_000);
      socket.on("close", () => clearInterval(drip));
      return { close: () => socket.destroy(), onClose: (fn) => socket.once("close", fn) };
    }),
  );
  // HTTP/2 that never calls: 5 sources x 500 on the curator port, more than its 2048 connections.
  const quiet = [1, 2, 3, 4, 5].map((n) =>
    keepOpen(500, () => {
      const session = http2Connect(`https://${host}:${CURATOR_PORT}`, { ...tls, localAddress: `127.0.10.${n}` } as never);
      session.on("error", () => {});
      return { close: () => session.destroy(), onClose: (fn) => session.once("close", fn) };
    }),
  );
  // Stalled handshakes from sources that finished an anonymous handshake first.
  await Promise.all(
    [1, 2, 3, 4, 5].map(
      (n) =>
        new Promise<void>((resolve) => {
          const socket = tlsConnect({ port: CURATOR_PORT, host, localAddress: `127.0.11.${n}`, ...tls, ALPNProtocols: ["h2"] } as ConnectionOptions, () => {
            socket.destroy();
            resolve();
          });
          socket.on("error", () => resolve());
        }),
    ),
  );
  const hello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]);
  const stalled = [1, 2, 3, 4, 5].map((n) =>
    keepOpen(40, () => {
      const socket = tcpConnect({ port: CURATOR_PORT, host, localAddress: `127.0.11.${n}` });
      socket.on("error", () => {});
      socket.on("connect", () => socket.write(hello));
      return { close: () => socket.destroy(), onClose: (fn) => socket.once("close", fn) };
    }),
  );
  // During the floods the same scrapes go on with the owner's own, as fast as they come back.
  // Without a certificate they are refused (401), or dropped (0) when the node
  // is full and keeps its room for known sources: never answered.
  // The owner's own are answered, or dropped or answered busy (503) when the
  // node is too slow (on a starved CPU its handshakes wait behind the
  // strangers'), but never refused (401, 403).
  let answeredWithoutCertificate = 0;
  const ownerStatuses: number[] = [];
  const owner = { cert: readFileSync(join(dir.path, "ctl", "owner.crt"), "utf8"), key: readFileSync(join(dir.path, "owner.key"), "utf8") };
  const scraping = Promise.all([
    (async () => {
      for (let round = 0; flooding; round++) {
        const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => scrape(`127.0.12.${((round * 20 + i) % 100) + 1}`)));
        answeredWithoutCertificate += statuses.filter((s) => s === 200).length;
      }
    })(),
    (async () => {
      while (flooding) ownerStatuses.push(...(await Promise.all(Array.from({ length: 5 }, () => scrape("127.0.0.1", owner)))));
    })(),
  ]);

  // The floods hold what they can; the owner writes ten labels meanwhile.
  await Bun.sleep(3_000);
  const written: string[] = [];
  for (let i = 0; i < 10; i++) {
    const label = `flood-${i}=held`;
    const result = await ctl("node", "label", id, label);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    written.push(`flood-${i}`);
  }
  // Long enough for the first-call deadline to have dropped the idle ones at least once.
  await Bun.sleep(12_000);
  const events = await eventually(
    async () => {
      const listed = await ctl("events", "-n", "500");
      for (const key of written) expect(listed.stdout).toMatch(new RegExp(`owner\\s.*Management/UpdateNodeLabels.*${key}`));
      return listed.stdout;
    },
    { timeoutMs: 30_000, intervalMs: 1_000, what: "the ten label writes in the audit trail" },
  );
  flooding = false;
  await scraping;
  for (const close of closers.splice(0)) close();
  // The floods ran: the node dropped the idle and stalled connections again and again, and answered no scrape without a certificate.
  expect(trickles.reduce((sum, dropped) => sum + dropped(), 0)).toBeGreaterThan(0);
  expect(quiet.reduce((sum, dropped) => sum + dropped(), 0)).toBeGreaterThan(0);
  expect(stalled.reduce((sum, dropped) => sum + dropped(), 0)).toBeGreaterThan(0);
  expect(answeredWithoutCertificate).toBe(0);
  expect(ownerStatuses.length).toBeGreaterThan(0);
  expect(ownerStatuses.filter((s) => s === 401 || s === 403)).toEqual([]);
  // The refusals are in the trail as a bounded few and a count, not one by one.
  const refusalLines = events.split("\n").filter((l) => l.includes("NodeManagement/Metrics"));
  expect(refusalLines.length).toBeGreaterThan(0);
  expect(refusalLines.length).toBeLessThanOrEqual(REFUSAL_LINES_BOUND);
}, 180_000);
