// Whatever happens to the launcher's process, launched clusters are torn
// down: on Ctrl-C, SIGTERM or SIGHUP (asynchronously: VMs, dnsmasq, taps,
// bridge, namespace, then the process dies of that signal, which its parent
// sees as 128+signal, 130 for Ctrl-C), and on any other exit,
// including an uncaught error (synchronously: no event loop is left then).
// A SIGKILL runs no handler; parent-death signals kill the children then
// (network_namespace.ts), and the next launch of that cluster removes its
// namespace.

export interface Closable {
  readonly label: string;
  close(): Promise<void>;
  /** Best effort without the event loop; never throws. */
  closeSync(): void;
}

const SIGNALS = { SIGINT: 2, SIGTERM: 15, SIGHUP: 1 } as const;
/** If re-raising the signal did not end the process by then, exit with its status. */
const RERAISE_GRACE_MS = 1_000;

const open = new Set<Closable>();
let installed = false;
let exiting = false;

function install(): void {
  if (installed) return;
  installed = true;
  process.on("exit", () => {
    for (const c of open) c.closeSync();
    open.clear();
  });
  for (const [signal, number] of Object.entries(SIGNALS)) {
    process.on(signal, () => {
      if (exiting) return; // A second Ctrl-C while tearing down: keep tearing down.
      exiting = true;
      process.stderr.write(`\nlaunch: ${signal}: tearing down ${[...open].map((c) => c.label).join(", ") || "nothing"}\n`);
      void Promise.allSettled([...open].map((c) => c.close())).finally(() => {
        // Die of the signal itself rather than exit(128+n): a shell sees the
        // same status, and `bun run` reports an exit code but not a signal as
        // an error ("script exited with code 130").
        process.removeAllListeners(signal);
        process.kill(process.pid, signal);
        setTimeout(() => process.exit(128 + number), RERAISE_GRACE_MS);
      });
    });
  }
}

/**
 * True once a signal has started the teardown. Whatever fails after that
 * (a wait for a console that ended, a command in a removed namespace) is its
 * consequence, not news: callers stay quiet and let the teardown end the process.
 */
export function interrupted(): boolean {
  return exiting;
}

/** Registers a resource to tear down on signals and exit. Returns the function that unregisters it. */
export function registerTeardown(closable: Closable): () => void {
  install();
  open.add(closable);
  return () => open.delete(closable);
}
