import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { dialFromOwnAddress, DialFromError } from "./dial_from.ts";

describe("a node process dialling from its own address", () => {
  test("grpc-js's connections to a loopback server come from the node's address once it is set, and from 127.0.0.1 before", async () => {
    const driver = Bun.spawn([process.execPath, join(import.meta.dir, "dial_from_driver.ts"), "127.0.0.23"], { stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(driver.stdout).text(), new Response(driver.stderr).text(), driver.exited]);
    expect({ code, err: code === 0 ? "" : err }).toEqual({ code: 0, err: "" });
    expect(JSON.parse(out)).toEqual({ before: "127.0.0.1", after: "127.0.0.23" });
  }, 30_000);

  test("only a loopback address is taken: one error naming it, and nothing changed", () => {
    expect(() => dialFromOwnAddress("10.0.0.5")).toThrow(new DialFromError('"10.0.0.5" is not a loopback address: only a node process on a shared host dials from an address of its own'));
    expect(() => dialFromOwnAddress("node1")).toThrow(DialFromError);
  });
});
