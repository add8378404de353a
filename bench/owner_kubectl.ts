// The built kubectl as the owner of a launched qemu cluster, for the benches
// that drive Kubernetes: runs inside the cluster's network namespace with
// the owner's kubeconfig (written by `ctl kubeconfig` into the cluster's
// directory); stdout, or an error with kubectl's stderr.

import { join } from "node:path";
import { eventually } from "../internal/testing/mod.ts";
import { KUBECTL_BINARY, type Cluster } from "../test/launch/mod.ts";

export function ownerKubectl(cluster: Cluster, requestTimeout = "30s"): { kubeconfig: string; kubectl: (...args: string[]) => Promise<string> } {
  const kubeconfig = join(cluster.dir.path, "owner.kubeconfig");
  const kubectl = async (...args: string[]) => {
    const result = await cluster.exec([KUBECTL_BINARY, "--kubeconfig", kubeconfig, `--request-timeout=${requestTimeout}`, ...args], { okExitCodes: [0, 1] });
    if (result.exitCode !== 0) throw new Error(`kubectl ${args.join(" ")}: ${result.stderr.trim()}`);
    return result.stdout;
  };
  return { kubeconfig, kubectl };
}

/** Waits until the pod's phase is Running, asking every `intervalMs`. */
export async function podRunning(kubectl: (...args: string[]) => Promise<string>, name: string, options: { timeoutMs: number; intervalMs: number; what?: string }): Promise<void> {
  await eventually(
    async () => {
      const phase = (await kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}")).trim();
      if (phase !== "Running") throw new Error(`phase ${phase || "none yet"}`);
    },
    { timeoutMs: options.timeoutMs, intervalMs: options.intervalMs, what: options.what ?? `${name} Running` },
  );
}
