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
    case "local":
      return "a local process";
    default:
      return `anonymous${from}`;
  }
}

/**
 * Fields that hold a secret, by name, at any depth: shown as "<redacted>"
 * (whether they are set, never what they hold). A field of a new message
 * that carries a secret must be named so.
 */
export const SECRET_FIELD = /password|secret|token|credentials|privatekey|unlockkey|objectsjson/i;

/** A URL with a user, password or query (a presigned upload's signature) as it may be shown: origin and path. */
function shownUrl(value: string): string | undefined {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return undefined;
  try {
    const url = new URL(value);
    if (!url.username && !url.password && !url.search) return undefined;
    return `${url.origin}${url.pathname}${url.search ? "?<query redacted>" : ""}`;
  } catch {
    return undefined;
  }
}

/** What a request asked, in one line: its fields but the node's identity and secrets (SECRET_FIELD), bytes as their length; cut at MAX_DETAIL_CHARS. */
export function describeRequest(request: unknown): string {
  const show = (value: unknown, depth: number): string => {
    if (value instanceof Uint8Array) return `<${value.length} bytes>`;
    if (typeof value === "bigint") return String(value);
    if (typeof value === "string") return JSON.stringify(shownUrl(value) ?? value);
    if (Array.isArray(value)) return `[${value.map((v) => show(v, depth + 1)).join(", ")}]`;
    if (value && typeof value === "object") {
      if (depth > 3) return "{…}";
      const fields = Object.entries(value).filter(([k, v]) => !k.startsWith("$") && v !== undefined && !(depth === 0 && (k === "id" || k === "publicKey")));
      return `{${fields.map(([k, v]) => `${k}: ${SECRET_FIELD.test(k) ? "<redacted>" : show(v, depth + 1)}`).join(", ")}}`;
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
