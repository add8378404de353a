// NTP for the cluster network: Debian's chronyd in the namespace, on the
// bridge's address, serving its own clock (which is the host's) at stratum
// 8, announced to the nodes by dnsmasq (DHCP option 42). Nothing is
// forwarded anywhere; the host's clock is never touched (-x).
//
// A test can make it ignore some nodes (deny), as a time server they cannot
// reach, and restart it serving everyone.

import { appendFileSync, writeFileSync } from "node:fs";
import type { Subprocess } from "bun";
import type { NetworkNamespace } from "./network_namespace.ts";
import { stopHostProcess } from "./host_command.ts";

export const CHRONYD_BINARY = "/usr/sbin/chronyd";
const STOP_GRACE_MS = 5_000;
const READY_DELAY_MS = 500;

export interface TimeServerOptions {
  /** Where it listens: the bridge's address. */
  address: string;
  /** The network it serves (a.b.c.0/24). */
  network: string;
  /** Addresses it ignores, as if it could not be reached from them. */
  deny?: readonly string[];
  confFile: string;
  pidFile: string;
  logFile: string;
}

/** chronyd's configuration: a server of its own clock, for `network` but `deny`. */
export function timeServerConfig(options: TimeServerOptions): string {
  return [
    "local stratum 8",
    ...(options.deny ?? []).map((a) => `deny ${a}`),
    `allow ${options.network}`,
    `bindaddress ${options.address}`,
    "port 123",
    "cmdport 0",
    `pidfile ${options.pidFile}`,
    "",
  ].join("\n");
}

export class TimeServer {
  private constructor(
    private readonly ns: NetworkNamespace,
    private child: Subprocess<"ignore", "pipe", "pipe">,
    private options: TimeServerOptions,
  ) {}

  static async start(ns: NetworkNamespace, options: TimeServerOptions): Promise<TimeServer> {
    return new TimeServer(ns, await spawn(ns, options), options);
  }

  /** Starts it again with new options (deny: [] serves everyone). */
  async restart(changes: Partial<TimeServerOptions>): Promise<void> {
    await this.stop();
    this.options = { ...this.options, ...changes };
    this.child = await spawn(this.ns, this.options);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    await stopHostProcess(this.child, STOP_GRACE_MS);
  }

  stopSync(): void {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  }
}

async function spawn(ns: NetworkNamespace, options: TimeServerOptions): Promise<Subprocess<"ignore", "pipe", "pipe">> {
  writeFileSync(options.confFile, timeServerConfig(options));
  const child = ns.spawn([CHRONYD_BINARY, "-d", "-x", "-u", "root", "-f", options.confFile]) as Subprocess<"ignore", "pipe", "pipe">;
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) appendFileSync(options.logFile, decoder.decode(chunk, { stream: true }));
  };
  void pump(child.stdout);
  void pump(child.stderr);
  await Bun.sleep(READY_DELAY_MS);
  if (child.exitCode !== null) throw new Error(`chronyd (the cluster network's time server) exited at once; see ${options.logFile}`);
  return child;
}
