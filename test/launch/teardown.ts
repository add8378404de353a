// Whatever happens to the launcher's process, launched clusters are torn
// down: on Ctrl-C, SIGTERM or SIGHUP (asynchronously: VMs, dnsmasq, taps,
// bridge, namespace, then exit with 128+signal), and on any other exit,
// including an uncaught error (synchronously: no event loop is left then).
// A SIGKILL runs no handler; parent-death signals kill the children then
// (network_namespace.ts), and the next launch sweeps the namespace.

export interface Closable {
  readonly label: string;
  close(): Promise<void>;
  /** Best effort without the event loop; never throws. */
  closeSync(): void;
}

const SIGNALS = { SIGINT: 2, SIGTERM: 15, SIGHUP: 1 } as const;

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
      void Promise.allSettled([...open].map((c) => c.close())).finally(() => process.exit(128 + number));
    });
  }
}

/** Registers a resource to tear down on signals and exit. Returns the function that unregisters it. */
export function registerTeardown(closable: Closable): () => void {
  install();
  open.add(closable);
  return () => open.delete(closable);
}
