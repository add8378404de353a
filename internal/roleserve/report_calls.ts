// A node's calls to its node management service, sent to the curator for
// the cluster's audit trail (Curator.ReportNodeManagementCall). Sent as they
// happen, one at a time, through whichever curator the node reaches; a
// report that cannot be sent within REPORT_TIMEOUT_MS (no curator, no
// quorum: a recovery's own call) is logged and dropped, never retried
// forever, and never holds the call up.
//
// Refusals (calls and scrapes refused for who made them: anyone can cause
// them) are reported at most REFUSALS_PER_CALLER from one caller and
// REFUSALS_OVERALL from everyone a minute, the rest counted in one report
// (rpc's RefusalBudget), and wait in a bounded queue of their own; the
// calls that change the node are sent first, and are never dropped for
// refusals.

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ReportNodeManagementCallRequestSchema } from "../../proto/gen/curator/curator_pb.ts";
import type { Value } from "../event/mod.ts";
import type { Logger } from "../log/mod.ts";
import { leftOutLine, RefusalBudget } from "../rpc/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";

/** Refusal reports waiting to be sent; beyond this the oldest go. */
const MAX_WAITING_REFUSALS = 100;
/** Call reports waiting (the curator unreachable for long): a bound that real calls never reach. */
const MAX_WAITING_CALLS = 1_000;
const REPORT_TIMEOUT_MS = 10_000;
/** Refusals reported one by one, per caller and from everyone, a minute. */
export const REFUSALS_PER_CALLER = 5;
export const REFUSALS_OVERALL = 20;
/** The method a minute's count of left-out refusals is reported as. */
export const REFUSALS_COUNT_METHOD = "NodeManagement/Refusals";

/** What a node reports of one call: Curator.ReportNodeManagementCall's request. */
export type NodeManagementReport = MessageInitShape<typeof ReportNodeManagementCallRequestSchema>;

export function nodeCallReporter(connection: Value<CuratorConnection>, logger: Logger, now: () => number = () => Date.now()): (report: NodeManagementReport) => void {
  const calls: NodeManagementReport[] = [];
  const refusals: NodeManagementReport[] = [];
  const budget = new RefusalBudget(REFUSALS_PER_CALLER, REFUSALS_OVERALL, now);
  let sending = false;
  const send = async () => {
    if (sending) return;
    sending = true;
    try {
      for (;;) {
        // Calls first: a refusal never waits in front of what the owner did.
        const report = calls.shift() ?? refusals.shift();
        if (!report) break;
        try {
          const current = connection.peek();
          if (!current) throw new Error("the node has no curator connection yet");
          await withCurator(current, (client) => client.reportNodeManagementCall(report, { timeoutMs: REPORT_TIMEOUT_MS }));
        } catch (err) {
          logger.warn("could not report a node management call to the audit trail", { method: report.method, caller: report.caller, error: (err as Error).message });
        }
      }
    } finally {
      sending = false;
    }
  };
  const bounded = (queue: NodeManagementReport[], bound: number, report: NodeManagementReport) => {
    queue.push(report);
    if (queue.length > bound) {
      const dropped = queue.shift()!;
      logger.warn("a node management report dropped: too many waiting for a curator", { method: dropped.method, waiting: queue.length });
    }
  };
  return (report) => {
    if (report.refused) {
      const { admit, leftOut } = budget.admit(report.caller ?? "");
      if (leftOut) bounded(refusals, MAX_WAITING_REFUSALS, { method: REFUSALS_COUNT_METHOD, caller: "", detail: leftOutLine(leftOut), result: "", refused: true, timeMs: BigInt(now()) });
      if (admit) bounded(refusals, MAX_WAITING_REFUSALS, report);
    } else bounded(calls, MAX_WAITING_CALLS, report);
    void send();
  };
}
