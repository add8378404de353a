// How big each VM of a launched cluster is: sized to the host, so that a
// launch never asks the host for more than it can run well.
//
// qemu runs each vCPU on a host thread of its own. Three VMs with two vCPUs
// each put six on a two-core host: a guest's vCPU is then taken off a core
// while it holds a lock or owes a heartbeat, and etcd's raft leader misses
// its heartbeats, the apiserver's /readyz says etcd failed, and the
// controller-manager and scheduler lose their leases and restart (issue 46:
// 11 and 10 restarts in 25 minutes; a one-VM cluster on the same host had
// none). So:
//  - vCPUs per VM: the host's cores shared out among the VMs, at least one
//    and at most MAX_VCPUS (one VM on two cores keeps both: its etcd, bun's
//    event loop and its JIT and GC threads stop queueing for one core);
//  - but node 1, the Kubernetes controller, never fewer than
//    MIN_CONTROLLER_VCPUS where the host has them: kubeadm refuses a control
//    plane on fewer than two CPUs and Talos names two cores its minimum
//    (workers one). With one vCPU under TCG, node1's apiserver, etcd, the
//    curator and the controller-manager queued for it while the
//    controller-manager built its controllers; its lease renewals went
//    unanswered for 40 s and it restarted (issue 46, three cluster e2e runs
//    on 2026-11-29). Two vCPUs for it give it half the host's two cores when
//    every VM is busy, and both when the workers idle;
//  - memory: each VM's default (CONTROLLER_MEMORY_MIB for node 1, which
//    runs the Kubernetes control plane; WORKER_MEMORY_MIB for the others),
//    scaled down to HOST_MEMORY_SHARE of the host's memory if they do not
//    fit, never below what they need to run (MIN_*);
//  - a warning, said before the launch, when the VMs still need more than
//    the host has: more VMs than cores, or less memory than they need.
// An explicit --cpus or --memory wins over the sizing, warned about the same.

import { availableParallelism, totalmem } from "node:os";
import { CONTROLLER_MEMORY_MIB, WORKER_MEMORY_MIB } from "../../image/mod.ts";

/** vCPUs a launched VM gets at most: past four, a node of this size gains little. */
export const MAX_VCPUS = 4;
/** vCPUs node 1, the Kubernetes controller, gets at least (when the host has that many cores): kubeadm's and Talos's minimum for a control plane. */
export const MIN_CONTROLLER_VCPUS = 2;
/** The share of the host's memory the VMs may take together; the rest is the host's (the build, the tests, the page cache). */
export const HOST_MEMORY_SHARE = 0.75;
/** Below these a node with the Kubernetes control plane, or a worker, runs out of memory. */
export const MIN_CONTROLLER_MEMORY_MIB = 2048;
export const MIN_WORKER_MEMORY_MIB = 1024;

export interface Host {
  cpus: number;
  memoryMiB: number;
}

export function thisHost(): Host {
  return { cpus: availableParallelism(), memoryMiB: Math.floor(totalmem() / 1024 / 1024) };
}

export interface VmSizing {
  /** Node 1's vCPUs (the Kubernetes controller), and every other node's. */
  controllerCpus: number;
  workerCpus: number;
  /** Node 1's memory (the Kubernetes controller), and every other node's. */
  controllerMemoryMiB: number;
  workerMemoryMiB: number;
  /** One line for the launch log: what was chosen, and why. */
  summary: string;
  /** What the host cannot run well, one line each (empty when it can). */
  warnings: string[];
}

/** The size of each of `nodes` VMs on `host`; `asked` is what the user gave (--cpus, --memory). */
export function sizeVms(nodes: number, host: Host, asked: { cpus?: number; memoryMiB?: number } = {}): VmSizing {
  if (!Number.isInteger(nodes) || nodes < 1) throw new RangeError(`node count must be a positive integer, got ${nodes}`);
  const cores = Math.max(1, Math.floor(host.cpus));
  const share = Math.min(MAX_VCPUS, Math.max(1, Math.floor(cores / nodes)));
  const workerCpus = asked.cpus ?? share;
  const controllerCpus = asked.cpus ?? Math.max(share, Math.min(MIN_CONTROLLER_VCPUS, cores));
  const budget = Math.floor(host.memoryMiB * HOST_MEMORY_SHARE);
  let controllerMemoryMiB = asked.memoryMiB ?? CONTROLLER_MEMORY_MIB;
  let workerMemoryMiB = asked.memoryMiB ?? WORKER_MEMORY_MIB;
  const total = () => controllerMemoryMiB + (nodes - 1) * workerMemoryMiB;
  if (asked.memoryMiB === undefined && total() > budget) {
    const scale = budget / total();
    controllerMemoryMiB = Math.max(MIN_CONTROLLER_MEMORY_MIB, Math.floor(controllerMemoryMiB * scale));
    workerMemoryMiB = Math.max(MIN_WORKER_MEMORY_MIB, Math.floor(workerMemoryMiB * scale));
  }
  const warnings: string[] = [];
  const vcpus = controllerCpus + (nodes - 1) * workerCpus;
  if (vcpus > cores) {
    warnings.push(
      `${nodes} VMs with ${describeCpus(nodes, controllerCpus, workerCpus)} on ${cores} host core${cores === 1 ? "" : "s"}: ${vcpus} vCPUs share them (${(vcpus / cores).toFixed(1)}×); expect slow starts, and Kubernetes' control plane may miss its deadlines under load`,
    );
  }
  if (total() > budget) {
    warnings.push(`the VMs take ${total()} MiB together, more than ${Math.round(HOST_MEMORY_SHARE * 100)}% of this host's ${host.memoryMiB} MiB; the host may swap`);
  }
  const memory = nodes === 1 ? `${controllerMemoryMiB} MiB` : `${controllerMemoryMiB} MiB for node1 (the controller), ${workerMemoryMiB} MiB for each other node`;
  const why =
    asked.cpus !== undefined
      ? "as asked (--cpus)"
      : `this host's ${cores} core${cores === 1 ? "" : "s"} shared among ${nodes} VM${nodes === 1 ? "" : "s"}, 1 to ${MAX_VCPUS} each${controllerCpus > share ? `, and the controller at least ${controllerCpus}` : ""}`;
  return { controllerCpus, workerCpus, controllerMemoryMiB, workerMemoryMiB, summary: `${describeCpus(nodes, controllerCpus, workerCpus, "gets")} (${why}) and ${memory}`, warnings };
}

const vcpuCount = (n: number) => `${n} vCPU${n === 1 ? "" : "s"}`;

/** "each VM gets 2 vCPUs", or "node1 gets 2 vCPUs, every other VM 1" ("with …" in a warning's form). */
function describeCpus(nodes: number, controllerCpus: number, workerCpus: number, verb?: "gets"): string {
  if (nodes === 1 || controllerCpus === workerCpus) return verb ? `each VM ${verb} ${vcpuCount(workerCpus)}` : `${vcpuCount(workerCpus)} each`;
  return verb ? `node1 (the controller) ${verb} ${vcpuCount(controllerCpus)}, every other VM ${workerCpus}` : `${vcpuCount(controllerCpus)} for node1 and ${workerCpus} for each other`;
}
