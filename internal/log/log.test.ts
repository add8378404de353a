import { describe, expect, test } from "bun:test";
import { budgeted, captureLogger, formatBytes, formatJson, formatText, type LogEntry } from "./mod.ts";

const entry: LogEntry = {
  time: new Date("2026-01-02T03:04:05.678Z"),
  level: "warn",
  component: "root.roleserve.controlplane",
  message: "etcd not ready",
  fields: { attempt: 3, peer: "node-1 a", err: new Error("refused") },
};

describe("log", () => {
  test("the text form is one line naming time, level and component", () => {
    expect(formatText(entry)).toBe('03:04:05.678 W root.roleserve.controlplane etcd not ready attempt=3 peer="node-1 a" err="refused"');
  });

  test("the JSON form is one object per line with flattened fields", () => {
    expect(JSON.parse(formatJson(entry))).toEqual({
      time: "2026-01-02T03:04:05.678Z",
      level: "warn",
      component: "root.roleserve.controlplane",
      msg: "etcd not ready",
      attempt: 3,
      peer: "node-1 a",
      err: "refused",
    });
  });

  test("child loggers are named by dotted path and identical lines are not throttled", () => {
    const { logger, entries } = captureLogger("root");
    const child = logger.child("roleserve").child("kubernetes");
    child.info("waiting for roles");
    child.info("waiting for roles");
    child.debug("detail", { n: 1 });
    expect(entries.map((e) => [e.component, e.level, e.message])).toEqual([
      ["root.roleserve.kubernetes", "info", "waiting for roles"],
      ["root.roleserve.kubernetes", "info", "waiting for roles"],
      ["root.roleserve.kubernetes", "debug", "detail"],
    ]);
    expect(entries[2]!.fields).toEqual({ n: 1 });
  });

  test("a budget bounds a chatty component's lines, says how many it held back, and leaves the others whole", () => {
    let now = 0;
    const written: LogEntry[] = [];
    const write = budgeted(
      (e) => written.push(e),
      { applies: (c) => c.endsWith(".output"), burst: 3, perSecond: 2, readThem: "read them elsewhere" },
      () => now,
    );
    const line = (component: string, message: string): LogEntry => ({ time: new Date(now), level: "info", component, message, fields: {} });
    for (let i = 0; i < 10; i++) write(line("root.etcd.output", `chatter ${i}`));
    for (let i = 0; i < 5; i++) write(line("root.etcd", `narrative ${i}`));
    expect(written.map((e) => e.message)).toEqual(["chatter 0", "chatter 1", "chatter 2", "narrative 0", "narrative 1", "narrative 2", "narrative 3", "narrative 4"]);
    // Half a second later the bucket has room for one: the note about the 7 held back comes first.
    now = 500;
    written.length = 0;
    write(line("root.etcd.output", "chatter 10"));
    expect(written.map((e) => [e.component, e.message])).toEqual([
      ["root.etcd.output", "7 lines of this component not shown here (more than 3 at once, or 2 a second); read them elsewhere"],
      ["root.etcd.output", "chatter 10"],
    ]);
  });
});

test("bytes are written as people read them: whole below a KiB, one decimal below ten units, binary units up to TiB", () => {
  expect([0, 1023, 1536, 10 * 1024, 5.5 * 1024 ** 3, 3 * 1024 ** 5].map(formatBytes)).toEqual(["0 B", "1023 B", "1.5 KiB", "10 KiB", "5.5 GiB", "3072 TiB"]);
});
