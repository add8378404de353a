// Finding the node's partitions by their GPT partition names.

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export interface BlockDevice {
  /** Kernel name, e.g. "vda2". */
  name: string;
  /** Device node, e.g. "/dev/vda2". */
  path: string;
  /** GPT partition name, if it is a named partition. */
  partitionName?: string;
}

/** Block devices the kernel knows, from sysfs uevent files. */
export function blockDevices(sysfs = "/sys/class/block", dev = "/dev"): BlockDevice[] {
  if (!existsSync(sysfs)) return [];
  return readdirSync(sysfs).map((name) => {
    let partitionName: string | undefined;
    try {
      const uevent = readFileSync(join(sysfs, name, "uevent"), "utf8");
      partitionName = /^PARTNAME=(.*)$/m.exec(uevent)?.[1];
    } catch {
      // A device without uevent has no partition name.
    }
    return { name, path: join(dev, name), ...(partitionName !== undefined ? { partitionName } : {}) };
  });
}

/** The partition with this GPT name, or undefined if there is none. */
export function findPartition(partitionName: string, devices: BlockDevice[] = blockDevices()): BlockDevice | undefined {
  return devices.find((d) => d.partitionName === partitionName);
}
