// `ctl cluster recover --from <node>`: the way back from a lost etcd quorum
// when one consensus member survives. The curator cannot answer without a
// quorum, so the survivor is reached directly, at the address the ctl
// config's curator list has for it (or one given as node-…@address), and
// asked through its node management service (RecoverConsensus):
//
//   plan (a dry run): the member's revision, the members it would remove,
//     whether a quorum still answers ─▶ printed, always first
//   --yes: recover (refused while a quorum answers, unless --force)
//   then, with progress: the member leads alone ─▶ a curator leads on it
//     ─▶ the node list shows no other consensus node
//
// The node does the work and converges by itself if interrupted
// (internal/roleserve/consensus_recovery.ts); this only asks and watches.

import type { RecoverConsensusResponse } from "../../proto/gen/api/node_management_pb.ts";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { parseEndpoint, type CuratorEndpoint } from "../curator/client/mod.ts";
import { dialNodeManagement } from "../nodemgmt/client/mod.ts";
import { sleep } from "../supervisor/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import { explain } from "./explain.ts";
import { listNodes, type CallSettings } from "./nodes.ts";

/** How long the recovered cluster has to answer writes again before ctl gives up watching. */
export const RECOVER_WAIT_MS = 5 * 60_000;
const POLL_MS = 500;

export interface RecoverOptions {
  /** Only print the plan. */
  dryRun: boolean;
  /** Go ahead (without it, the plan is printed and nothing is done). */
  yes: boolean;
  /** Recover even though a quorum answers. */
  force: boolean;
}

export interface RecoverResult {
  survivor: string;
  revision: number;
  lost: string[];
  quorum: boolean;
  started: boolean;
  /** From the request to a curator leading on the recovered member, and every other node without the consensus role. */
  writableAfterMs?: number;
}

/** Where to reach `from`: an endpoint as typed (node-…@address), or the ctl config's curator of that node. */
export function survivorEndpoint(credentials: OwnerCredentials, from: string): CuratorEndpoint & { nodeId: string } {
  let typed: CuratorEndpoint;
  try {
    typed = from.includes("@") ? parseEndpoint(from) : { host: "", port: 0, nodeId: from };
  } catch (err) {
    throw new OperatorError(`--from ${from}: ${(err as Error).message}`);
  }
  if (!typed.nodeId || !/^node-[0-9a-f]{16}$/.test(typed.nodeId)) throw new OperatorError(`--from ${from}: name the surviving node by its ID (node- and 16 hex digits), optionally as node-…@address`);
  if (typed.host) return { ...typed, nodeId: typed.nodeId };
  const known = credentials.endpoints.find((e) => e.nodeId === typed.nodeId);
  if (!known) {
    const listed = credentials.endpoints.flatMap((e) => e.nodeId ?? []).join(", ") || "none";
    throw new OperatorError(`--from ${from}: the ctl config lists no curator of that node (it lists ${listed}); give its address as ${from}@<address>`);
  }
  return { ...known, nodeId: typed.nodeId };
}

/** The plan, as the lines printed before anything is done. */
export function describePlan(plan: RecoverConsensusResponse): string[] {
  const lines = [
    `survivor: ${plan.survivor} (etcd member ${plan.memberId}), at revision ${plan.revision}: the cluster keeps what this member has, and loses any write it had not applied`,
    plan.quorum ? `quorum: still there (${plan.quorumReason})` : `quorum: lost (${plan.quorumReason})`,
  ];
  if (plan.lost.length === 0) lines.push("members removed: none (it is alone already)");
  for (const m of plan.lost) lines.push(`removed from etcd, and its consensus role dropped: ${m.name || "(a member that never started)"} (member ${m.memberId}, ${m.peerUrl || "no peer URL"})`);
  if (plan.lost.length) lines.push("a removed node must never come back with its data: wipe it before it joins again (two of them together would still make a quorum of the old membership)");
  return lines;
}

/**
 * Shows the plan through `note` (lines that stay); with `yes`, recovers and
 * waits until the cluster takes writes on the survivor again, saying each
 * step through `note` and the waits through `progress`.
 */
export async function recoverConsensus(
  credentials: OwnerCredentials,
  settings: CallSettings,
  from: string,
  options: RecoverOptions,
  say: { note: (line: string) => void; progress: (line: string) => void },
): Promise<RecoverResult> {
  const { note, progress } = say;
  const survivor = survivorEndpoint(credentials, from);
  const client = dialNodeManagement(survivor.nodeId, survivor.host, { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey });
  try {
    const ask = (dryRun: boolean) =>
      client.recoverConsensus({ dryRun, force: options.force }, { timeoutMs: settings.timeoutMs }).catch((err: unknown) => {
        throw new OperatorError(`${survivor.nodeId}: ${explain(err).line}`);
      });
    const plan = await ask(true);
    for (const line of describePlan(plan)) note(line);
    const result: RecoverResult = { survivor: plan.survivor, revision: Number(plan.revision), lost: plan.lost.map((m) => m.name), quorum: plan.quorum, started: false };
    if (options.dryRun) return result;
    if (!options.yes) throw new OperatorError("nothing was done: run it again with --yes to recover as above");
    const started = performance.now();
    await ask(false);
    result.started = true;
    note(`recovery started on ${survivor.nodeId}: its etcd restarts as a one-member cluster`);

    const deadline = Date.now() + RECOVER_WAIT_MS;
    const until = async <T>(what: string, check: () => Promise<T | undefined>): Promise<T> => {
      progress(`waiting for ${what} ...`);
      let last = "";
      while (Date.now() < deadline) {
        const outcome = await check().catch((err: unknown) => {
          last = explain(err).line;
          return undefined;
        });
        if (outcome !== undefined) return outcome;
        await sleep(POLL_MS);
      }
      throw new OperatorError(
        `the recovery was started, but ${what} did not happen within ${RECOVER_WAIT_MS / 60_000} min${last ? ` (last: ${last})` : ""}; look at ctl node logs ${survivor.nodeId} root.roleserve.controlplane`,
      );
    };
    await until("its etcd member leading alone", async () => {
      const s = await client.getEtcdStatus({}, { timeoutMs: settings.timeoutMs });
      return s.leaderId !== "" && s.leaderId === s.memberId ? true : undefined;
    });
    note(`${survivor.nodeId}'s etcd member leads alone`);
    const curator = { ...credentials, endpoints: [{ host: survivor.host, port: survivor.port, nodeId: survivor.nodeId }] };
    await until("a curator leading on it", async () => {
      const info = await withFailover(Management, curator, (m) => m.getClusterInfo({}, { timeoutMs: settings.timeoutMs }));
      return info.curatorLeader ? true : undefined;
    });
    note("a curator leads on it");
    await until("the node list without other consensus nodes", async () => {
      const nodes = await listNodes(curator, settings);
      return nodes.every((n) => n.id === survivor.nodeId || !n.roles.includes("consensus")) ? true : undefined;
    });
    result.writableAfterMs = Math.round(performance.now() - started);
    note(`the cluster takes writes again, ${(result.writableAfterMs / 1000).toFixed(1)} s after the request`);
    return result;
  } finally {
    client.close();
  }
}
