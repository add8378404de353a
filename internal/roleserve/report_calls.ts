// A node's calls to its node management service, sent to the curator for
// the cluster's audit trail (Curator.ReportNodeManagementCall). Sent as they
// happen, one at a time, through whichever curator the node reaches; a
// report that cannot be sent within REPORT_TIMEOUT_MS (no curator, no
// quorum: a recovery's own call) is logged and dropped, never retried
// forever, and never holds the call up.

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ReportNodeManagementCallRequestSchema } from "../../proto/gen/curator/curator_pb.ts";
import type { Value } from "../event/mod.ts";
import type { Logger } from "../log/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";

/** Reports waiting to be sent; beyond this the oldest go. */
const MAX_WAITING = 100;
const REPORT_TIMEOUT_MS = 10_000;

/** What a node reports of one call: Curator.ReportNodeManagementCall's request. */
export type NodeManagementReport = MessageInitShape<typeof ReportNodeManagementCallRequestSchema>;

export function nodeCallReporter(connection: Value<CuratorConnection>, logger: Logger): (report: NodeManagementReport) => void {
  const waiting: NodeManagementReport[] = [];
  let sending = false;
  const send = async () => {
    if (sending) return;
    sending = true;
    try {
      while (waiting.length) {
        const report = waiting.shift()!;
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
  return (report) => {
    waiting.push(report);
    if (waiting.length > MAX_WAITING) waiting.shift();
    void send();
  };
}
