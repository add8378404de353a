import { describe, expect, test } from "bun:test";
import { captureLogger, formatJson, formatText, type LogEntry } from "./mod.ts";

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
});
