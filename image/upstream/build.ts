// Building the upstream components from their wrapper modules, cached by
// version outside the work tree.
//
// Each component's output folder is named for what shaped it:
//
//   <cache>/<name>-<version>-<fingerprint>/      (default cache: ~/.cache/nodecore/upstream)
//
// where the fingerprint hashes the wrapper's files (go.mod, go.sum, main
// packages), the component's entry in components.ts (packages, tags, stamps)
// and `go version`. A folder is built as <folder>.partial, filled, given a
// BUILT file listing what is in it, and renamed: a folder without BUILT, or
// any .partial, is never used (a killed build starts again from the Go
// build cache, which keeps the compiled packages).

import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { CommandError } from "../../internal/supervisor/mod.ts";
import { run } from "../exec.ts";
import { COMPONENTS, type Component } from "./components.ts";
import { GO_VERSION_LINE, goEnv, UPSTREAM_DIR } from "./go.ts";

/** Where built components are kept between builds (and between clones). */
export function upstreamCacheDir(): string {
  return process.env.NODECORE_UPSTREAM_CACHE || join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "nodecore", "upstream");
}

/** A component could not be built; the message is one line naming it, its version and the step. */
export class UpstreamBuildError extends Error {
  override name = "UpstreamBuildError";
}

const BUILT_FILE = "BUILT";

/** The wrapper files that shape a component's build, sorted. */
function wrapperFiles(c: Component): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.go$|^go\.(mod|sum)$/.test(entry.name)) files.push(path);
    }
  };
  walk(join(UPSTREAM_DIR, c.name));
  return files.sort();
}

let goVersionText: string | undefined;
async function goVersion(): Promise<string> {
  if (goVersionText === undefined) {
    try {
      goVersionText = (await run(["go", "version"], { env: goEnv() })).stdout.trim();
    } catch (cause) {
      throw new UpstreamBuildError(`go is not usable (${oneLine(cause)}); the upstream build needs ${GO_VERSION_LINE.replace(/^go /, "Go ")} or newer (GOTOOLCHAIN=local)`);
    }
  }
  return goVersionText;
}

/** The fingerprint of everything that shapes c's binaries. */
export async function componentFingerprint(c: Component): Promise<string> {
  const hasher = new Bun.CryptoHasher("sha256");
  hasher.update(JSON.stringify(c));
  hasher.update(await goVersion());
  for (const file of wrapperFiles(c)) {
    hasher.update(file.slice(UPSTREAM_DIR.length));
    hasher.update(readFileSync(file));
  }
  return hasher.digest("hex").slice(0, 16);
}

export async function componentDir(c: Component): Promise<string> {
  return join(upstreamCacheDir(), `${c.name}-${c.version}-${await componentFingerprint(c)}`);
}

/** Whether dir holds a complete build (its BUILT file lists every binary, all present). */
export function isComplete(dir: string, c: Component): boolean {
  const built = join(dir, BUILT_FILE);
  if (!existsSync(built)) return false;
  return [...c.binaries.map((b) => b.name), ...Object.keys(c.links)].every((name) => existsSync(join(dir, name)));
}

function oneLine(cause: unknown): string {
  if (cause instanceof CommandError) {
    // Go prints the failing package or module last; keep the lines that say why.
    const lines = cause.stderr
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "" && !l.startsWith("go: downloading"));
    return lines.slice(-3).join(" | ").slice(0, 600) || `exit ${cause.exitCode}`;
  }
  return (cause instanceof Error ? cause.message : String(cause)).split("\n")[0]!;
}

function checkPinned(c: Component): void {
  const goMod = readFileSync(join(UPSTREAM_DIR, c.name, "go.mod"), "utf8");
  for (const [module, version] of Object.entries(c.requires)) {
    if (!new RegExp(`^\\s*${module.replace(/[.\/]/g, "\\$&")} ${version.replace(/\./g, "\\.")}\\b`, "m").test(goMod)) {
      throw new UpstreamBuildError(
        `${c.name}: image/upstream/${c.name}/go.mod does not require ${module} ${version} as versions.ts says; run 'bun image/upstream/pin.ts ${c.name}' and commit go.mod and go.sum`,
      );
    }
  }
}

/** While a long step runs, how often the build says it is still at it. */
export const HEARTBEAT_MS = 30_000;

/**
 * Runs one step of a component's build, saying when it starts, every
 * HEARTBEAT_MS while it runs, and how long it took: a cold Kubernetes
 * build is minutes of one `go build`, and nobody should watch one line
 * that long.
 */
export async function loggedStep<T>(what: string, log: (line: string) => void, work: () => Promise<T>, heartbeatMs = HEARTBEAT_MS): Promise<T> {
  const started = performance.now();
  const elapsed = () => ((performance.now() - started) / 1000).toFixed(0);
  log(`${what} …`);
  const timer = setInterval(() => log(`${what}: still at it after ${elapsed()} s`), heartbeatMs);
  try {
    const result = await work();
    log(`${what}: done in ${elapsed()} s`);
    return result;
  } finally {
    clearInterval(timer);
  }
}

async function buildInto(c: Component, dir: string, log: (line: string) => void): Promise<void> {
  const cwd = join(UPSTREAM_DIR, c.name);
  const env = goEnv({ CGO_ENABLED: c.cgo ? "1" : "0" });
  // Download first, so that a module the proxy cannot serve is named as such.
  await loggedStep(`${c.name}: fetching modules`, log, async () => {
    try {
      await run(["go", "mod", "download"], { cwd, env });
    } catch (cause) {
      throw new UpstreamBuildError(`${c.name} ${c.version}: fetching modules failed: ${oneLine(cause)}`);
    }
  });
  const ldflags = ["-s", "-w", ...Object.entries(c.stamps).map(([k, v]) => `-X ${k}=${v}`)];
  if (c.staticLink) ldflags.push("-extldflags", "-static");
  for (const [i, binary] of c.binaries.entries()) {
    const argv = ["go", ...(binary.test ? ["test", "-c"] : ["build"]), "-trimpath", "-buildvcs=false", "-ldflags", ldflags.join(" "), "-o", join(dir, binary.name)];
    if (c.tags.length > 0) argv.push("-tags", c.tags.join(","));
    argv.push(binary.pkg);
    await loggedStep(`${c.name}: building ${binary.name} (${i + 1} of ${c.binaries.length})`, log, async () => {
      try {
        await run(argv, { cwd, env });
      } catch (cause) {
        throw new UpstreamBuildError(`${c.name} ${c.version}: building ${binary.name} (${binary.pkg}) failed: ${oneLine(cause)}`);
      }
    });
  }
  for (const [link, target] of Object.entries(c.links)) symlinkSync(target, join(dir, link));
}

export interface BuildReport {
  component: Component;
  dir: string;
  /** Whether it was built now (false: found complete in the cache). */
  built: boolean;
  seconds: number;
}

/**
 * Builds c unless a complete build of the same inputs is cached; returns its
 * folder. Throws UpstreamBuildError (one line: component, version, step).
 */
export async function buildComponent(c: Component, log: (line: string) => void = () => {}): Promise<BuildReport> {
  const started = performance.now();
  checkPinned(c);
  const dir = await componentDir(c);
  if (isComplete(dir, c)) return { component: c, dir, built: false, seconds: 0 };
  rmSync(dir, { recursive: true, force: true });
  const partial = `${dir}.partial`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  await buildInto(c, partial, log);
  const listing = readdirSync(partial)
    .sort()
    .map((name) => {
      const stat = statSync(join(partial, name));
      return `${name} ${stat.size}`;
    });
  writeFileSync(join(partial, BUILT_FILE), `${c.module} ${c.version}\n${listing.join("\n")}\n`);
  renameSync(partial, dir);
  return { component: c, dir, built: true, seconds: (performance.now() - started) / 1000 };
}

/**
 * Builds (or finds) every component, saying what it does as it goes: one
 * line per cached component; for one it builds, a line as each step starts
 * and ends and a heartbeat while it runs (see loggedStep). Returns name -> folder.
 */
export async function buildUpstream(log: (line: string) => void = console.log): Promise<Record<string, string>> {
  const dirs: Record<string, string> = {};
  const started = performance.now();
  let built = 0;
  for (const [i, c] of COMPONENTS.entries()) {
    const report = await buildComponent(c, (line) => log(`upstream: [${i + 1}/${COMPONENTS.length}] ${line}`));
    dirs[c.name] = report.dir;
    if (report.built) built++;
    log(report.built ? `upstream: built ${c.name} ${c.version} in ${report.seconds.toFixed(0)} s` : `upstream: ${c.name} ${c.version} cached`);
  }
  if (built > 0) log(`upstream: ${built} of ${COMPONENTS.length} components built in ${((performance.now() - started) / 1000).toFixed(0)} s`);
  return dirs;
}

if (import.meta.main) {
  try {
    const dirs = await buildUpstream();
    for (const [name, dir] of Object.entries(dirs)) console.log(`${name}\t${dir}`);
  } catch (error) {
    console.error(`upstream: ${error instanceof UpstreamBuildError ? error.message : oneLine(error)}`);
    process.exit(1);
  }
}
