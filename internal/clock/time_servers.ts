// The NTP servers the node parameters name: checked like any parameter, and
// kept on the ESP (one per line) so that every later boot, which joins
// with its sealed configuration and reads no parameters, syncs with them
// too. Not secret: the ESP is not encrypted, and need not be.

import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import { writeFileDurably } from "../localstorage/mod.ts";
import { MAX_TIME_SERVERS, timeServerProblem } from "./chrony.ts";

/** Why a list of servers cannot be used, in one line; undefined if it can. */
export function timeServersProblem(servers: readonly string[]): string | undefined {
  if (servers.length > MAX_TIME_SERVERS) return `${servers.length} time servers, more than ${MAX_TIME_SERVERS}`;
  for (const server of servers) {
    const problem = timeServerProblem(server);
    if (problem) return `time server ${JSON.stringify(server.slice(0, 80))} ${problem}`;
  }
  return undefined;
}

/** Keeps the list (none: the file goes). */
export function saveTimeServers(path: string, servers: readonly string[]): void {
  if (servers.length === 0) {
    rmSync(path, { force: true });
    return;
  }
  mkdirSync(dirname(path), { recursive: true });
  writeFileDurably(path, `${servers.join("\n")}\n`);
}

/** The kept list; lines that are no server (a damaged file) are left out. */
export function loadTimeServers(path: string): string[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && timeServerProblem(l) === undefined)
    .slice(0, MAX_TIME_SERVERS);
}
