// An HTTP PUT target for scheduled backups: a URL the owner names (an
// object store's bucket behind a presigned or token-bearing URL, a WebDAV
// folder, a plain upload server). Each proven backup is PUT under it by its
// file name; what the target keeps, and for how long, is the target's own
// business: nodecore never deletes there.
//
//   https://store.example/backups/?token=…  +  2026-11-25T10-00-00-000Z-r812.backup
//     ─▶ PUT https://store.example/backups/2026-11-25T10-00-00-000Z-r812.backup?token=…
//
// The file is encrypted to the owner, so a target that reads it learns its
// size and nothing else. The URL may carry a secret (a query token, a user
// and password), so it is shown as its origin and path only.

import { basename } from "node:path";

/** The longest target URL accepted. */
export const MAX_TARGET_URL_LENGTH = 2048;

/** Why `url` cannot be a backup target, in one line; undefined if it can. */
export function targetUrlProblem(url: string): string | undefined {
  if (url.length > MAX_TARGET_URL_LENGTH) return `the URL is ${url.length} characters long; at most ${MAX_TARGET_URL_LENGTH}`;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return "it is not a URL (for example https://store.example/backups/)";
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return `its scheme is ${parsed.protocol.slice(0, 16)}; use http or https`;
  if (parsed.hash) return "it has a fragment (#…), which no server sees";
  return undefined;
}

/** Where the backup `file` goes under `target`: its name appended to the target's path, the query kept. */
export function targetFor(target: string, file: string): URL {
  const url = new URL(target);
  url.pathname = `${url.pathname.replace(/\/?$/, "/")}${encodeURIComponent(basename(file))}`;
  return url;
}

/** A target URL as it is shown and recorded: origin and path, without a user, password or query. */
export function shownTarget(url: string | URL): string {
  const parsed = typeof url === "string" ? new URL(url) : url;
  return `${parsed.origin}${parsed.pathname}`;
}

/** The least upload speed before an upload is given up (besides its first minute). */
const LEAST_BYTES_PER_SECOND = 256 * 1024;

/**
 * PUTs the backup `file` under `target`. Resolves with where it went (as
 * shown); throws one line naming the target and the cause: unreachable,
 * too slow, or the status it answered (507 for a full one).
 */
export async function uploadBackup(target: string, file: string, signal: AbortSignal): Promise<string> {
  const url = targetFor(target, file);
  const shown = shownTarget(url);
  const body = Bun.file(file);
  const limitMs = 60_000 + Math.ceil((body.size / LEAST_BYTES_PER_SECOND) * 1000);
  let response: Response;
  try {
    response = await fetch(url, {
      method: "PUT",
      body,
      headers: { "content-type": "application/octet-stream" },
      redirect: "error",
      signal: AbortSignal.any([signal, AbortSignal.timeout(limitMs)]),
    });
  } catch (err) {
    if (signal.aborted) throw err;
    const e = err as Error & { code?: string };
    if (e.name === "TimeoutError") throw new Error(`the backup target ${shown} took longer than ${Math.round(limitMs / 1000)} s`);
    const said = e.code ? (CAUSES[e.code] ?? e.code) : e.message;
    throw new Error(`the backup target ${shown} is unreachable: ${oneLine(said)}`);
  }
  await response.body?.cancel().catch(() => {});
  if (!response.ok) {
    const why = response.status === 507 ? " (the target is full)" : response.status === 413 ? " (the target refuses a file this large)" : "";
    throw new Error(`the backup target ${shown} answered HTTP ${response.status} ${oneLine(response.statusText)}${why}`);
  }
  return shown;
}

/** Network error codes as people say them. */
const CAUSES: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ENOTFOUND: "no such host",
  ECONNRESET: "the connection was reset",
  EHOSTUNREACH: "no route to the host",
  ENETUNREACH: "no route to the network",
};

function oneLine(text: string): string {
  return text.replace(/\s+/g, " ").trim().slice(0, 200);
}
