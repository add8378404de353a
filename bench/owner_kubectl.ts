// The built kubectl as the owner of a launched qemu cluster, for the benches
// that drive Kubernetes: runs inside the cluster's network namespace with
// the owner's kubeconfig (written by `ctl kubeconfig` into the cluster's
// directory); stdout, or an error with kubectl's stderr.

import { join } from "node:path";
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
