// How a call reads in an audit trail (internal/curator/audit.ts): who made
// it, what it asked, how it ended; bounded and encodable, whatever the input.
// The curator's trail and a node's reports of its node management calls
// (internal/nodemgmt) word calls alike.

import { Status, toStatus } from "./errors.ts";
import type { Peer } from "./peer.ts";
import { encodable } from "./text.ts";

/** The longest detail or result kept. */
export const MAX_DETAIL_CHARS = 300;

/** Who made a call, as the trail names them. */
export function actorOf(peer: Peer | undefined, remoteAddress: string | undefined): string {
  const from = remoteAddress ? ` from ${remoteAddress}` : "";
  switch (peer?.kind) {
    case "owner":
      return "owner";
    case "node":
      return peer.nodeId;
    case "join":
      return `${peer.nodeId} (join key)`;
    case "metrics":
      return `metrics reader ${JSON.stringify(encodable(peer.name, 64))}${from}`;
    case "key":
      return `an unverified key${from}`;
    default:
      return `anonymous${from}`;
  }
}

/** What a request asked, in one line: its fields but the node's identity, bytes as their length; cut at MAX_DETAIL_CHARS. */
export function describeRequest(request: unknown): string {
  const show = (value: unknown, depth: number): string => {
    if (value instanceof Uint8Array) return `<${value.length} bytes>`;
    if (typeof value === "bigint") return String(value);
    if (typeof value === "string") return JSON.stringify(value);
    if (Array.isArray(value)) return `[${value.map((v) => show(v, depth + 1)).join(", ")}]`;
    if (value && typeof value === "object") {
      if (depth > 3) return "{…}";
      const fields = Object.entries(value).filter(([k, v]) => !k.startsWith("$") && v !== undefined && !(depth === 0 && (k === "id" || k === "publicKey")));
      return `{${fields.map(([k, v]) => `${k}: ${show(v, depth + 1)}`).join(", ")}}`;
    }
    return String(value);
  };
  if (!request || typeof request !== "object") return "";
  const text = show(request, 0);
  // encodable adds an ellipsis to what it cuts.
  return encodable(text === "{}" ? "" : text, MAX_DETAIL_CHARS - 1);
}

/** OK, or the status (after `mapError`) and its message. */
export function callResult(error: unknown, mapError: (err: unknown) => unknown = (e) => e): string {
  if (error === undefined) return "OK";
  const { code, details } = toStatus(mapError(error));
  return encodable(`${Status[code] ?? code}: ${details}`, MAX_DETAIL_CHARS - 1);
}

/** Whether a call was refused for who made it. */
export function isRefusal(err: unknown): boolean {
  const { code } = toStatus(err);
  return code === Status.UNAUTHENTICATED || code === Status.PERMISSION_DENIED;
}
