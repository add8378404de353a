// The HTTP PUT target: which URLs are accepted, where a file goes under
// one, what is shown of it, and an upload against a real HTTP server on
// loopback that stores, is full, or is not there.

import { afterAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { MAX_TARGET_URL_LENGTH, shownTarget, targetFor, targetUrlProblem, uploadBackup } from "./target.ts";

const dir = tempDir("nodecore-target-");
const file = join(dir.path, "2026-11-25T10-00-00-000Z-r812.backup");
const bytes = new Uint8Array(300_000).map((_, i) => (i * 7) % 251);
writeFileSync(file, bytes);

const received: { path: string; query: string; body: Uint8Array }[] = [];
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname.startsWith("/full/")) return new Response("no space", { status: 507, statusText: "Insufficient Storage" });
    if (request.method !== "PUT") return new Response("", { status: 405 });
    received.push({ path: url.pathname, query: url.search, body: new Uint8Array(await request.arrayBuffer()) });
    return new Response("", { status: 201 });
  },
});
afterAll(() => {
  server.stop(true);
  dir[Symbol.dispose]();
});

describe("a target URL", () => {
  test("http and https are accepted; anything else is refused in one line, naming why", () => {
    expect(targetUrlProblem("https://store.example/backups/?token=abc")).toBeUndefined();
    expect(targetUrlProblem("http://10.0.0.9:8080")).toBeUndefined();
    const refused = [
      "",
      "store.example/backups",
      "ftp://store.example/",
      "file:///data/backups",
      "https://store.example/#x",
      `https://x.example/${"a".repeat(MAX_TARGET_URL_LENGTH)}`,
      "https://exa mple\n.com/",
    ];
    for (const url of refused) {
      const problem = targetUrlProblem(url);
      expect(problem).toBeString();
      expect(problem!.split("\n")).toHaveLength(1);
      expect(problem!.length).toBeLessThan(200);
    }
    expect(targetUrlProblem("ftp://store.example/")).toBe("its scheme is ftp:; use http or https");
  });

  test("a file goes under the target's path by its name, with the query kept; what is shown has no user, password or query", () => {
    expect(targetFor("https://store.example/backups/?token=abc", "/data/backups/a-r1.backup").href).toBe("https://store.example/backups/a-r1.backup?token=abc");
    expect(targetFor("https://store.example/backups", "/x/a-r1.backup").href).toBe("https://store.example/backups/a-r1.backup");
    expect(targetFor("http://10.0.0.9:8080", "a-r1.backup").href).toBe("http://10.0.0.9:8080/a-r1.backup");
    expect(shownTarget("https://user:secret@store.example/backups/?token=abc")).toBe("https://store.example/backups/");
  });
});

describe("an upload", () => {
  const base = `http://127.0.0.1:${server.port}`;

  test("PUTs the file's bytes under its name, the query kept, and says where it went", async () => {
    const to = await uploadBackup(`${base}/cluster-a/?token=t0k`, file, AbortSignal.timeout(10_000));
    expect(to).toBe(`${base}/cluster-a/2026-11-25T10-00-00-000Z-r812.backup`);
    const got = received.at(-1)!;
    expect(got.path).toBe("/cluster-a/2026-11-25T10-00-00-000Z-r812.backup");
    expect(got.query).toBe("?token=t0k");
    expect(Buffer.from(got.body).equals(Buffer.from(bytes))).toBe(true);
  });

  test("a full target, and one that is not there, fail in one line naming the target and the cause", async () => {
    const full = await uploadBackup(`${base}/full/?token=secret`, file, AbortSignal.timeout(10_000)).catch((e: Error) => e.message);
    expect(full).toBe(`the backup target ${base}/full/2026-11-25T10-00-00-000Z-r812.backup answered HTTP 507 Insufficient Storage (the target is full)`);

    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const port = closed.port;
    closed.stop(true);
    const gone = await uploadBackup(`http://127.0.0.1:${port}/b/`, file, AbortSignal.timeout(10_000)).catch((e: Error) => e.message);
    expect(gone).toStartWith(`the backup target http://127.0.0.1:${port}/b/2026-11-25T10-00-00-000Z-r812.backup is unreachable: `);
    expect(gone.split("\n")).toHaveLength(1);
  });
});
