import { describe, expect, test } from "bun:test";
import { createLogger } from "../log/mod.ts";
import { eventually } from "../testing/mod.ts";
import { LogTree, matches, parseKmsgRecord, MAX_MESSAGE_CHARS } from "./mod.ts";

const at = (n: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, n));

describe("rings", () => {
  test("each component keeps only its newest entries, and a chatty one evicts only its own", () => {
    const tree = new LogTree({ ringEntries: 3 });
    tree.append({ time: at(0), level: "info", path: "root.quiet", message: "said once" });
    for (let i = 0; i < 10; i++) tree.append({ time: at(i), level: "info", path: "root.chatty", message: `line ${i}` });
    expect(tree.backlog({ path: "root.chatty", subtree: false }, -1).map((e) => e.message)).toEqual(["line 7", "line 8", "line 9"]);
    expect(tree.backlog({ path: "root.quiet", subtree: false }, -1).map((e) => e.message)).toEqual(["said once"]);
  });

  test("a backlog across rings comes out in the order it was written, and is cut to the newest n", () => {
    const tree = new LogTree();
    tree.append({ time: at(0), level: "info", path: "root.a", message: "1" });
    tree.append({ time: at(1), level: "info", path: "root.b", message: "2" });
    tree.append({ time: at(2), level: "info", path: "root.a", message: "3" });
    tree.append({ time: at(3), level: "info", path: "root.a.child", message: "4" });
    expect(tree.backlog({ path: "", subtree: true }, -1).map((e) => e.message)).toEqual(["1", "2", "3", "4"]);
    expect(tree.backlog({ path: "", subtree: true }, 2).map((e) => e.message)).toEqual(["3", "4"]);
    expect(tree.backlog({ path: "root.a", subtree: false }, -1).map((e) => e.message)).toEqual(["1", "3"]);
    expect(tree.backlog({ path: "root.a", subtree: true }, -1).map((e) => e.message)).toEqual(["1", "3", "4"]);
    expect(tree.backlog({ path: "root.a", subtree: true }, 0)).toEqual([]);
  });

  test("a minimum level leaves out what is below it, even within the newest n", () => {
    const tree = new LogTree();
    tree.append({ time: at(0), level: "warn", path: "root.a", message: "old warning" });
    for (let i = 0; i < 5; i++) tree.append({ time: at(1), level: "debug", path: "root.a", message: `noise ${i}` });
    tree.append({ time: at(2), level: "error", path: "root.a", message: "failure" });
    expect(tree.backlog({ path: "root.a", subtree: false, minLevel: "warn" }, 2).map((e) => e.message)).toEqual(["old warning", "failure"]);
  });

  test("a subtree means the path and what is below it, not every name that starts the same", () => {
    expect(matches({ path: "root.a", subtree: true }, { path: "root.a.b", level: "info" })).toBe(true);
    expect(matches({ path: "root.a", subtree: true }, { path: "root.ab", level: "info" })).toBe(false);
    expect(matches({ path: "root.a", subtree: false }, { path: "root.a.b", level: "info" })).toBe(false);
  });

  test("messages and field values are clipped, and fields keep their order as text", () => {
    const tree = new LogTree();
    tree.append({ time: at(0), level: "info", path: "root", message: "x".repeat(MAX_MESSAGE_CHARS + 10), fields: { b: 2, a: new Error("boom"), c: "text" } });
    const [entry] = tree.backlog({ path: "root", subtree: false }, 1);
    expect(entry!.message.length).toBeLessThan(MAX_MESSAGE_CHARS + 50);
    expect(entry!.message).toEndWith("(10 more characters)");
    expect(entry!.fields).toEqual([
      ["b", "2"],
      ["a", "boom"],
      ["c", "text"],
    ]);
  });

  test("beyond the most rings allowed, the one written to least recently goes", () => {
    const tree = new LogTree({ maxRings: 2 });
    tree.append({ time: at(0), level: "info", path: "one", message: "1" });
    tree.append({ time: at(1), level: "info", path: "two", message: "2" });
    tree.append({ time: at(2), level: "info", path: "one", message: "3" });
    tree.append({ time: at(3), level: "info", path: "three", message: "4" });
    expect(tree.paths()).toEqual(["one", "three"]);
  });

  test("at the bound on all text, the ring holding the most gives up its oldest entries", () => {
    const tree = new LogTree({ maxTotalChars: 100 });
    tree.append({ time: at(0), level: "info", path: "q", message: "quiet" });
    for (let i = 0; i < 20; i++) tree.append({ time: at(i), level: "info", path: "c", message: `chatty line ${i}` });
    expect(tree.stats().chars).toBeLessThanOrEqual(100);
    expect(tree.backlog({ path: "q", subtree: false }, -1).map((e) => e.message)).toEqual(["quiet"]);
    const kept = tree.backlog({ path: "c", subtree: false }, -1).map((e) => e.message);
    expect(kept.at(-1)).toBe("chatty line 19");
    expect(kept.length).toBeLessThan(20);
    expect(tree.stats().entries).toBe(kept.length + 1);
  });

  test("every logger under a root feeds its own ring through the sink", () => {
    const tree = new LogTree();
    const root = createLogger("root", { format: "none", level: "debug", sinks: [tree.sink] });
    root.child("roleserve").child("controlplane").info("got membership", { node: "node-1" });
    root.info("started");
    expect(tree.paths()).toEqual(["root", "root.roleserve.controlplane"]);
    const [entry] = tree.backlog({ path: "root.roleserve", subtree: true }, -1);
    expect(entry!.message).toBe("got membership");
    expect(entry!.fields).toEqual([["node", "node-1"]]);
  });
});

describe("followers", () => {
  test("a follower gets new entries that pass its filter, until it stops", async () => {
    const tree = new LogTree();
    tree.append({ time: at(0), level: "info", path: "root.a", message: "before" });
    const controller = new AbortController();
    const seen: string[] = [];
    const following = (async () => {
      for await (const entry of tree.follow({ path: "root.a", subtree: true, minLevel: "info" }, controller.signal)) seen.push(entry.message);
    })();
    tree.append({ time: at(1), level: "info", path: "root.a.b", message: "after" });
    tree.append({ time: at(2), level: "debug", path: "root.a", message: "too low" });
    tree.append({ time: at(3), level: "info", path: "root.other", message: "elsewhere" });
    tree.append({ time: at(4), level: "error", path: "root.a", message: "later" });
    await eventually(() => expect(seen).toEqual(["after", "later"]));
    controller.abort();
    await following;
  });

  test("a follower that falls behind loses entries, not memory, and is told how many", async () => {
    const tree = new LogTree({ followQueueEntries: 3 });
    const controller = new AbortController();
    const iterator = tree.follow({ path: "", subtree: true }, controller.signal)[Symbol.asyncIterator]();
    const first = iterator.next();
    for (let i = 0; i < 10; i++) tree.append({ time: at(i), level: "info", path: "root", message: `m${i}` });
    const seen = [(await first).value!.message];
    for (let i = 0; i < 3; i++) seen.push((await iterator.next()).value!.message);
    expect(seen).toEqual(["m0", "m1", "m2", "follower fell behind: 7 entries not sent"]);
    controller.abort();
    await iterator.return?.();
  });
});

describe("kernel messages", () => {
  test("a kmsg record becomes a level, a time since boot and its text", () => {
    expect(parseKmsgRecord("6,339,5140900,-;virtio_net virtio0 eth0: renamed\n SUBSYSTEM=net")).toEqual({
      level: "info",
      sequence: 339,
      bootUs: 5140900,
      message: "virtio_net virtio0 eth0: renamed",
    });
    expect(parseKmsgRecord("3,1,2,-;EXT4-fs error")?.level).toBe("error");
    expect(parseKmsgRecord("12,1,2,c;user warning")?.level).toBe("warn");
    expect(parseKmsgRecord("no semicolon")).toBeUndefined();
    expect(parseKmsgRecord("x,1,2;bad priority")).toBeUndefined();
  });
});
