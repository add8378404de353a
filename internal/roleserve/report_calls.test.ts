import { expect, test } from "bun:test";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { eventually } from "../testing/mod.ts";
import type { CuratorConnection } from "./curator_connection.ts";
import { nodeCallReporter, REFUSALS_COUNT_METHOD, REFUSALS_OVERALL, type NodeManagementReport } from "./report_calls.ts";

/** A curator connection whose one curator takes reports into `sent`, each after `delayMs`. */
function fakeConnection(sent: NodeManagementReport[], delayMs = 0): Value<CuratorConnection> {
  const client = {
    reportNodeManagementCall: async (report: NodeManagementReport) => {
      await Bun.sleep(delayMs);
      sent.push(report);
      return {};
    },
  };
  const connection = { endpoints: [], pool: { call: async (_service: unknown, _endpoints: unknown, call: (c: unknown, e: unknown) => Promise<unknown>) => call(client, {}) } };
  const value = new Value<CuratorConnection>();
  value.set(connection as unknown as CuratorConnection);
  return value;
}

test("refusals are reported a few per caller and minute and a few overall, counted in one report after; the owner's calls go first and are never dropped", async () => {
  let now = 60_000 * 500;
  const sent: NodeManagementReport[] = [];
  const report = nodeCallReporter(fakeConnection(sent, 2), captureLogger("t").logger, () => now);
  const refused = (caller: string): NodeManagementReport => ({
    method: "NodeManagement/Metrics",
    caller,
    detail: "",
    result: "PERMISSION_DENIED: no client certificate presented",
    refused: true,
    timeMs: 0n,
  });
  // 100 anonymous scrapes from 50 addresses, then the owner's defragmentation and rollback.
  for (let i = 0; i < 100; i++) report(refused(`anonymous from 10.0.0.${i % 50}`));
  report({ method: "NodeManagement/DefragmentEtcd", caller: "owner", detail: "", result: "OK", refused: false, timeMs: 0n });
  report({ method: "NodeManagement/Rollback", caller: "owner", detail: "", result: "OK", refused: false, timeMs: 0n });
  await eventually(() => expect(sent.length).toBe(REFUSALS_OVERALL + 2));
  const methods = sent.map((r) => r.method);
  expect(methods).toContain("NodeManagement/DefragmentEtcd");
  expect(methods).toContain("NodeManagement/Rollback");
  // Sent ahead of refusals still waiting: within the first few.
  expect(methods.indexOf("NodeManagement/Rollback")).toBeLessThan(5);
  // One caller alone gets its own few.
  for (let i = 0; i < 10; i++) report(refused("anonymous from 10.9.9.9"));
  // The next minute: one report counts what was left out.
  now += 60_000;
  report(refused("anonymous from 10.1.1.1"));
  await eventually(() => expect(sent.filter((r) => r.method === REFUSALS_COUNT_METHOD).length).toBe(1));
  const count = sent.find((r) => r.method === REFUSALS_COUNT_METHOD)!;
  expect(count.detail).toBe(`and ${100 + 10 - REFUSALS_OVERALL} more refused calls from 51 callers in that minute, not recorded one by one`);
  expect(count.refused).toBe(true);
});
