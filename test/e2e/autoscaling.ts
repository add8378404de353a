// The autoscaling step of the cluster e2e (issue 51): what a user does on
// the first day with the Metrics API beyond `kubectl top`. A Deployment
// that burns CPU and a HorizontalPodAutoscaler (autoscaling/v2) over it;
// the HPA scales it up from the Metrics API's figures, and back down once
// the user ends the load. Everything goes through kubectl, as a user's
// manifest and commands would.
//
//   apply burner (1 replica, burning) + HPA ─▶ HPA reads metrics.k8s.io ─▶ 2 replicas Ready
//   kubectl exec: each pod stops burning     ─▶ HPA reads it            ─▶ 1 replica

import { eventually } from "../../internal/testing/mod.ts";
import { TEST_IMAGE_REF } from "../../internal/containerd/mod.ts";
import { assert } from "./harness.ts";

export const BURNER = "burner";
/** The HPA's bounds: it starts at the minimum, and the load drives it to the maximum. */
const MIN_REPLICAS = 1;
const MAX_REPLICAS = 2;
/** A pod stops burning once this file exists (a user's `kubectl exec`). */
const IDLE_FILE = "/tmp/idle";
/**
 * The CPU a burner asks for and may use. The limit keeps a busy loop from
 * taking a TCG worker's whole vCPU; it is still four times the request, so
 * a burning pod is at 400 % of its request against the HPA's 50 % target.
 */
const CPU_REQUEST = "50m";
const CPU_LIMIT = "200m";
const TARGET_UTILIZATION = 50;

/** The Deployment: one busy loop per pod, until IDLE_FILE exists; then it sleeps. */
export function burnerDeployment(): unknown {
  const labels = { app: BURNER };
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: BURNER, labels },
    spec: {
      replicas: MIN_REPLICAS,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            {
              name: "main",
              image: TEST_IMAGE_REF,
              imagePullPolicy: "Never",
              // `:` and `[` are the shell's own: the loop forks nothing.
              command: ["sh", "-c", `while [ ! -e ${IDLE_FILE} ]; do :; done; exec sleep 86400`],
              resources: { requests: { cpu: CPU_REQUEST }, limits: { cpu: CPU_LIMIT } },
            },
          ],
        },
      },
    },
  };
}

/**
 * The HPA. Scaling down waits out no stabilization window (upstream's
 * default is 5 minutes, which only delays what this step proves), and may
 * halve the replicas every 15 s.
 */
export function burnerAutoscaler(): unknown {
  return {
    apiVersion: "autoscaling/v2",
    kind: "HorizontalPodAutoscaler",
    metadata: { name: BURNER },
    spec: {
      scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: BURNER },
      minReplicas: MIN_REPLICAS,
      maxReplicas: MAX_REPLICAS,
      metrics: [{ type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: TARGET_UTILIZATION } } }],
      behavior: { scaleDown: { stabilizationWindowSeconds: 0, policies: [{ type: "Percent", value: 100, periodSeconds: 15 }] } },
    },
  };
}

interface AutoscalerStatus {
  currentReplicas?: number;
  desiredReplicas?: number;
  currentMetrics?: { resource?: { current?: { averageUtilization?: number } } }[];
  conditions?: { type: string; status: string; reason?: string; message?: string }[];
}

/** The HPA's status in one line, for a wait's message: replicas, utilization, and its conditions that are not True. */
function describe(status: AutoscalerStatus): string {
  const utilization = status.currentMetrics?.[0]?.resource?.current?.averageUtilization;
  const notTrue = (status.conditions ?? []).filter((c) => c.status !== "True").map((c) => `${c.type} ${c.status}: ${c.reason} (${c.message})`);
  return `current ${status.currentReplicas ?? "?"}, desired ${status.desiredReplicas ?? "?"}, CPU ${utilization ?? "?"} % of requests${notTrue.length ? `; ${notTrue.join("; ")}` : ""}`;
}

export interface AutoscalingFigures {
  /** Applied → MAX_REPLICAS pods Ready. */
  scaledUpMs: number;
  /** The utilization the HPA read when it scaled up. */
  utilizationAtMax: number | undefined;
  /** The load ended → the Deployment back at MIN_REPLICAS. */
  scaledDownMs: number;
}

/**
 * Runs the step with `kubectl` (the owner's, in the launcher's namespace)
 * and `write` (a file kubectl can read): returns its figures. Leaves
 * nothing behind: the Deployment and the HPA are deleted at the end.
 */
export async function autoscalingStep(kubectl: (...args: string[]) => Promise<string>, write: (name: string, body: unknown) => string, timeoutMs: number): Promise<AutoscalingFigures> {
  const status = async () => (JSON.parse(await kubectl("get", "hpa", BURNER, "-o", "json")) as { status?: AutoscalerStatus }).status ?? {};
  const readyReplicas = async () => Number((await kubectl("get", "deployment", BURNER, "-o", "jsonpath={.status.readyReplicas}")).trim() || "0");
  const applied = performance.now();
  await kubectl("apply", "-f", write("burner.json", { apiVersion: "v1", kind: "List", items: [burnerDeployment(), burnerAutoscaler()] }));

  let utilizationAtMax: number | undefined;
  await eventually(
    async () => {
      const s = await status();
      const ready = await readyReplicas();
      assert(s.desiredReplicas === MAX_REPLICAS && ready === MAX_REPLICAS, `the HPA scaled ${BURNER} up to ${MAX_REPLICAS} replicas, all Ready (${ready} Ready; HPA: ${describe(s)})`);
      utilizationAtMax = s.currentMetrics?.[0]?.resource?.current?.averageUtilization;
    },
    { timeoutMs, intervalMs: 5_000, what: `the HPA scaling ${BURNER} up` },
  );
  const scaledUpMs = performance.now() - applied;

  // The user ends the load in every pod the HPA made.
  const ended = performance.now();
  const pods = (await kubectl("get", "pods", "-l", `app=${BURNER}`, "-o", "jsonpath={.items[*].metadata.name}")).trim().split(/\s+/).filter(Boolean);
  assert(pods.length === MAX_REPLICAS, `${MAX_REPLICAS} ${BURNER} pods to end the load in: ${pods.join(", ")}`);
  for (const pod of pods) await kubectl("exec", pod, "--", "sh", "-c", `: > ${IDLE_FILE}`);
  await eventually(
    async () => {
      const s = await status();
      const wanted = Number((await kubectl("get", "deployment", BURNER, "-o", "jsonpath={.spec.replicas}")).trim());
      assert(s.desiredReplicas === MIN_REPLICAS && wanted === MIN_REPLICAS, `the HPA scaled ${BURNER} back down to ${MIN_REPLICAS} (the Deployment wants ${wanted}; HPA: ${describe(s)})`);
    },
    { timeoutMs, intervalMs: 5_000, what: `the HPA scaling ${BURNER} down` },
  );
  const scaledDownMs = performance.now() - ended;

  await kubectl("delete", "hpa", BURNER, "--wait=false");
  await kubectl("delete", "deployment", BURNER, "--wait=false");
  return { scaledUpMs, utilizationAtMax, scaledDownMs };
}
