// The system image: a read-only squashfs the image build makes beside the
// initramfs (image/system.ts) for what only some roles need, the container
// runtime first. The launcher attaches it as a read-only virtio drive with a
// fixed serial number; a node mounts it when a role first needs it, so that
// nodes without those roles pay nothing for it at boot.

import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { MS_NODEV, MS_NOSUID, MS_RDONLY, mount } from "../sys/mod.ts";
import { isMounted, StorageError } from "./data_partition.ts";

/** The serial number the launcher gives the system image's drive (qemu -drive serial=). */
export const SYSTEM_IMAGE_SERIAL = "nodecore-system";

/** The device whose virtio serial number is SYSTEM_IMAGE_SERIAL, if one is attached. */
export function findSystemImageDevice(sysfs = "/sys/block", dev = "/dev"): string | undefined {
  if (!existsSync(sysfs)) return undefined;
  for (const name of readdirSync(sysfs)) {
    try {
      if (readFileSync(join(sysfs, name, "serial"), "utf8").trim() === SYSTEM_IMAGE_SERIAL) return join(dev, name);
    } catch {
      // No serial: not a virtio disk.
    }
  }
  return undefined;
}

/** Mounts the system image read-only at `mountpoint`, unless it is mounted already. */
export function mountSystemImage(mountpoint: string): void {
  if (isMounted(mountpoint)) return;
  const device = findSystemImageDevice();
  if (!device) throw new StorageError(`the system image is not attached: no drive with serial ${SYSTEM_IMAGE_SERIAL} (the launcher attaches out/image/system.squashfs)`);
  mkdirSync(mountpoint, { recursive: true });
  try {
    mount(device, mountpoint, "squashfs", MS_RDONLY | MS_NOSUID | MS_NODEV);
  } catch (err) {
    throw new StorageError(`could not mount the system image ${device} on ${mountpoint}: ${(err as Error).message}`, { cause: err });
  }
}
