// What a node says on its console on the way up, as patterns, and the boot
// milestones measured from them: host receive times since qemu started (the
// guest's clocks are not the host's).

import type { ConsoleLine } from "./serial_console.ts";

/** Console lines the launcher, the e2e test and the bench look for. */
export const CONSOLE = {
  kernelRunsInit: /Run \/init as init process/,
  /** The node logger's text form: "12:00:01.234 I root ..." */
  initLogLine: /^\d\d:\d\d:\d\d\.\d{3} [DIWE] \S+ /,
  modulesLoaded: /I root kernel modules loaded /,
  espMounted: /I root ESP mounted /,
  /** PID 1's slot choice (internal/update/select.ts): the running build, or the chosen slot's kernel about to be kexec'd. */
  slotChosen: /I root booting slot [ab] /,
  /** A node kexec'd into the slot its boot record chose. */
  slotKexecd: /I root booted slot [ab].* by kexec/,
  systemVerified: /I root system image verified /,
  /** The booted slot's system image failed verification (internal/update/refuse.ts decides what follows). */
  slotRefused: /E root the booted slot must not run /,
  /** Node management began writing an update into the other slot (internal/nodemgmt). */
  updateWriting: /I root\.nodemgmt writing \S+ into slot [ab] /,
  parametersRead: /parameters ask to (bootstrap a new cluster|register into a cluster)/,
  /** Enrolment's first decision: from parameters, or join with the sealed configuration. */
  enrolmentDecided: /parameters ask to (bootstrap a new cluster|register into a cluster)|found sealed configuration, joining the cluster/,
  dataFormatted: /data partition formatted and mounted/,
  dataMounted: /data partition (formatted and )?mounted/,
  addressAcquired: /got address \S+ via DHCP/,
  /** The status runnable, once enrolment has opened the data partition and the node has credentials. */
  memberOfCluster: /storage mounted, node is part of the cluster/,
  /** The status runnable, each time the node's roles arrive from the cluster. */
  nodeUp: /I root\.status node is UP /,
  fatalBanner: /^# FATAL: this node cannot continue/,
  kernelPanic: /Kernel panic|end Kernel panic/,
  powerButton: /stopping the node .*power button/,
  poweringOff: /I root powering off/,
  /** PID 1 could not unmount a file system at poweroff and detached it instead. */
  unmountFailed: /unmount failed, detaching/,
  /** The kernel replaying a journal: the file system was not unmounted cleanly. */
  ext4Recovery: /EXT4-fs \(dm-\d+\): recovery complete/,
} as const;

/**
 * What waiting for each console line means, completing "waiting for node2 ...".
 * Progress lines say this, never the pattern: a person reads milestones.
 */
const AWAITED: Record<keyof typeof CONSOLE, string> = {
  slotChosen: "to choose the slot it boots",
  slotKexecd: "to come up on the chosen slot's kernel",
  kernelRunsInit: "to run /init",
  initLogLine: "to print its first init log line",
  modulesLoaded: "to load its kernel modules",
  espMounted: "to mount its ESP",
  systemVerified: "to verify its system image",
  slotRefused: "to refuse its slot",
  updateWriting: "to begin writing the update",
  parametersRead: "to read its parameters",
  enrolmentDecided: "to decide how to enrol",
  dataFormatted: "to format its data partition",
  dataMounted: "to mount its storage",
  addressAcquired: "to get an address via DHCP",
  memberOfCluster: "to be part of the cluster",
  nodeUp: "to be UP",
  fatalBanner: "to show a FATAL banner",
  kernelPanic: "to panic",
  powerButton: "to see the power button",
  poweringOff: "to power off",
  unmountFailed: "to fail an unmount",
  ext4Recovery: "to replay its ext4 journal",
};

/** "to be UP" for CONSOLE.nodeUp; patterns of the caller's own get a generic phrase. */
export function awaitedMilestone(pattern: RegExp): string {
  const key = (Object.keys(CONSOLE) as (keyof typeof CONSOLE)[]).find((k) => CONSOLE[k] === pattern);
  return key ? AWAITED[key] : `to print a line matching /${pattern.source}/`;
}

export interface Milestone {
  name: string;
  /** Milliseconds after qemu started, or undefined if the boot never got there. */
  ms: number | undefined;
  line?: string;
}

/** A node's way up, in the order it usually gets there. */
export const BOOT_MILESTONES: readonly { name: string; pattern: RegExp }[] = [
  { name: "kernel runs /init", pattern: CONSOLE.kernelRunsInit },
  { name: "first init log line", pattern: CONSOLE.initLogLine },
  { name: "kernel modules loaded", pattern: CONSOLE.modulesLoaded },
  { name: "slot chosen", pattern: CONSOLE.slotChosen },
  { name: "system image verified", pattern: CONSOLE.systemVerified },
  { name: "enrolment decided", pattern: CONSOLE.enrolmentDecided },
  { name: "address acquired", pattern: CONSOLE.addressAcquired },
  { name: "storage mounted", pattern: CONSOLE.dataMounted },
  { name: "part of the cluster", pattern: CONSOLE.memberOfCluster },
  { name: "node is UP", pattern: CONSOLE.nodeUp },
];

/** The milestones of one boot's console. */
export function bootMilestones(lines: readonly ConsoleLine[]): Milestone[] {
  return BOOT_MILESTONES.map(({ name, pattern }) => {
    const line = lines.find((l) => pattern.test(l.text));
    return line ? { name, ms: line.ms, line: line.text } : { name, ms: undefined };
  });
}

/** "   12.34 s  kernel modules loaded" lines. */
export function formatMilestones(milestones: readonly Milestone[], indent = "  "): string {
  return milestones.map((m) => `${indent}${m.ms === undefined ? "      —" : `${(m.ms / 1000).toFixed(2).padStart(7)} s`}  ${m.name}`).join("\n");
}
