// containerd as a supervised child process, and ctr, its command-line
// client, for the few calls the node makes (image import, run, task list).

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Value } from "../event/mod.ts";
import { runCommand, runProcess, sleep, type ParsedLine, type Runnable } from "../supervisor/mod.ts";
import { joinCgroup } from "./cgroup.ts";
import { cniConflist, cniPaths, containerdConfig, CONTAINERD_NAMESPACE, CRI_NAMESPACE, runtimeBinaries, runtimeEnv, type RuntimePaths } from "./config.ts";

const READY_POLL_MS = 200;

export interface ContainerdOptions {
  paths: RuntimePaths;
  /** Written: true once containerd answers on its socket, false once it stopped. */
  ready: Value<boolean>;
  /**
   * Serve CRI too (a kubelet runs beside it), with these OCI tarballs (the
   * sandbox image, the test image) imported into CRI's namespace before it
   * counts as ready: the kubelet never pulls.
   */
  cri?: {
    images: readonly string[];
  };
}

/**
 * Writes the pods' CNI network for the node's pod prefix ("10.244.3.0/24",
 * as the curator assigned it) where CRI reads it. containerd may already
 * run: CRI watches its conf_dir and loads the network again on a write (it
 * ignores the creation alone, so the file is written in place, not renamed
 * there). Until the file is there the kubelet's Node is NotReady ("cni
 * plugin not initialized"), and pods wait for it.
 */
export function writeCniConflist(paths: RuntimePaths, podPrefix: string): void {
  const cni = cniPaths(paths);
  mkdirSync(cni.confDir, { recursive: true, mode: 0o700 });
  writeFileSync(cni.conflist, cniConflist(paths, podPrefix), { mode: 0o600 });
}

/** The argv of `ctr <args>` against this node's containerd, in the node's namespace (or another). */
export function ctrArgv(paths: RuntimePaths, args: readonly string[], namespace: string = CONTAINERD_NAMESPACE): string[] {
  return [runtimeBinaries(paths.prefix).ctr, "--address", paths.socket, "--namespace", namespace, ...args];
}

/** Runs `ctr <args>` (ctrArgv) to completion; returns its stdout. */
export async function ctr(paths: RuntimePaths, args: readonly string[], signal?: AbortSignal, namespace?: string): Promise<string> {
  const { stdout } = await runCommand(ctrArgv(paths, args, namespace), { env: runtimeEnv(paths.prefix), ...(signal ? { signal } : {}) });
  return stdout;
}

const LEVELS: Record<string, ParsedLine["level"]> = { debug: "debug", info: "info", warning: "warn", error: "error", fatal: "error", panic: "error" };

/**
 * One line of containerd's (logrus, logfmt) output as a log entry:
 * `time="…" level=info msg="…" key=value …`. Lines of another shape are
 * left as they are (undefined).
 */
export function parseContainerdLine(line: string): ParsedLine | undefined {
  const fields: Record<string, string> = {};
  const pair = /([\w.-]+)=("(?:[^"\\]|\\.)*"|\S*)/g;
  for (const match of line.matchAll(pair)) {
    const [, key = "", raw = ""] = match;
    fields[key] = raw.startsWith('"') ? (JSON.parse(raw) as string) : raw;
  }
  const level = LEVELS[fields.level ?? ""];
  if (level === undefined || fields.msg === undefined) return undefined;
  const { time: _time, level: _level, msg, ...rest } = fields;
  return { level, message: msg, ...(Object.keys(rest).length ? { fields: rest } : {}) };
}

/**
 * The containerd runnable: writes its configuration, starts it in the
 * runtime's cgroup, and is healthy once `ctr version` gets an answer.
 */
export function containerdService(options: ContainerdOptions): Runnable {
  const { paths } = options;
  return async (ctx) => {
    mkdirSync(paths.root, { recursive: true, mode: 0o700 });
    mkdirSync(paths.state, { recursive: true, mode: 0o700 }); // the socket's directory too
    writeFileSync(paths.config, containerdConfig(paths, { cri: options.cri !== undefined }), { mode: 0o600 });
    // CRI watches the CNI folder from its start (writeCniConflist fills it).
    if (options.cri) mkdirSync(cniPaths(paths).confDir, { recursive: true, mode: 0o700 });
    try {
      await runProcess(ctx, {
        command: runtimeBinaries(paths.prefix).containerd,
        args: ["--config", paths.config],
        env: runtimeEnv(paths.prefix),
        // Its shims are its children, so they land in this cgroup too.
        onSpawn: (pid) => {
          try {
            joinCgroup(join(paths.cgroup, "containerd"), pid);
          } catch (error) {
            ctx.logger.warn("could not move containerd into the runtime's cgroup; stopping the role will not find its shims", { cgroup: paths.cgroup, error: (error as Error).message });
          }
        },
        parseLine: parseContainerdLine,
        ready: async (signal) => {
          for (;;) {
            try {
              await ctr(paths, ["version"], signal);
              break;
            } catch {
              await sleep(READY_POLL_MS, signal);
            }
          }
          ctx.logger.info("containerd answers", { socket: paths.socket });
          for (const image of options.cri?.images ?? []) {
            await ctr(paths, ["images", "import", image], signal, CRI_NAMESPACE);
            ctx.logger.info("container image imported for the kubelet", { image, namespace: CRI_NAMESPACE });
          }
          options.ready.set(true);
        },
      });
    } finally {
      options.ready.set(false);
    }
  };
}
