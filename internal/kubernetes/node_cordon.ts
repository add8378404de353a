// The cordon a ctl command makes before it drains a node, and takes back
// itself (internal/operator/drain.ts, node_power.ts): marked on the Node as
// CORDONED_BY_ANNOTATION, "<command> at <ISO time>", so that the command
// run again after an interruption knows the cordon is its own, and
// `ctl cluster health` can say who made it and when.
//
// `ctl node poweroff` cannot take its cordon back: its node is off. The
// controller's reconciler does (reconciler.ts, reconcileNodes), as Talos
// uncordons a node it cordoned once it is back: a Node marked by a
// power-off whose Ready condition turned True after the mark's time has
// come back, and is made schedulable again, its mark removed, in one JSON
// patch that first tests the mark is still the one read (a newer power-off
// or an operator's change wins). A node that was off for less than the
// Node's grace period may never have turned NotReady; its Ready condition
// then dates from before the mark, and it stays cordoned for the owner to
// take back (ctl node uncordon): the safe side.

/** The annotation on a Node that a ctl command cordoned and will take back. */
export const CORDONED_BY_ANNOTATION = "nodecore.dev/cordoned-by";
/** The command whose cordon the controller takes back when its node is back. */
export const POWEROFF_COMMAND = "ctl node poweroff";

/** The mark's value for a cordon made by `by` now (or at `atMs`). */
export function cordonMark(by: string, atMs = Date.now()): string {
  return `${by} at ${new Date(atMs).toISOString()}`;
}

/** A mark read back: the command and when; undefined when the value is not a mark. */
export function parseCordonMark(mark: string | undefined): { by: string; atMs: number } | undefined {
  const parsed = mark === undefined ? null : /^(.{1,100}) at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z)$/.exec(mark);
  const atMs = parsed ? Date.parse(parsed[2]!) : NaN;
  return parsed && !Number.isNaN(atMs) ? { by: parsed[1]!, atMs } : undefined;
}

/** The parts of a Node this reads. */
export interface CordonedNode {
  metadata?: { name?: string; annotations?: Record<string, string> };
  spec?: { unschedulable?: boolean };
  status?: { conditions?: { type?: string; status?: string; lastTransitionTime?: string | Date }[] };
}

/** Whether `node` was cordoned by a power-off and has come back since: Ready, and Ready only since after the mark's time. */
export function backFromPowerOff(node: CordonedNode): boolean {
  if (node.spec?.unschedulable !== true) return false;
  const mark = parseCordonMark(node.metadata?.annotations?.[CORDONED_BY_ANNOTATION]);
  if (!mark || mark.by !== POWEROFF_COMMAND) return false;
  const ready = node.status?.conditions?.find((c) => c.type === "Ready");
  const since = ready?.lastTransitionTime === undefined ? NaN : new Date(ready.lastTransitionTime).getTime();
  return ready?.status === "True" && since > mark.atMs;
}

/** The JSON patch that uncordons `node` and removes its mark, only if the mark is still `mark`. */
export function uncordonPatch(mark: string): { op: string; path: string; value?: unknown }[] {
  const path = `/metadata/annotations/${CORDONED_BY_ANNOTATION.replaceAll("~", "~0").replaceAll("/", "~1")}`;
  return [
    { op: "test", path, value: mark },
    { op: "remove", path },
    { op: "add", path: "/spec/unschedulable", value: false },
  ];
}
