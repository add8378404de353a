// The declared tree of the node's storage: every file and directory the node
// core uses, by name, under one root ("/" on a node, a temporary directory in
// tests). Code asks the layout for a path instead of building one.

import { join } from "node:path";

/** GPT partition names the image builder gives the node's partitions. */
export const ESP_PARTITION_NAME = "ESP";
export const DATA_PARTITION_NAME = "DATA";
/** The device-mapper name of the unlocked data partition. */
export const DATA_MAPPER_NAME = "data";

/**
 * The two system slots. PID 1's slot choice boots one; each has its
 * kernel, initramfs and command line on the ESP, and its system image (with
 * a dm-verity hash tree) on a partition of its own.
 */
export type Slot = "a" | "b";
export const SLOTS: readonly Slot[] = ["a", "b"];
export const SYSTEM_PARTITION_NAMES: Readonly<Record<Slot, string>> = { a: "SYSTEM-A", b: "SYSTEM-B" };
/** The device-mapper name of the verified system image. */
export const SYSTEM_MAPPER_NAME = "system";
/** The boot record, relative to the ESP: "active=<slot>", and "next=<slot>" for a one-shot trial. */
export const ESP_BOOT_RECORD = "nodecore/boot";

/** A slot's boot files, relative to the ESP (select.ts reads the same paths). */
export function espSlotFiles(slot: Slot) {
  const dir = `nodecore/slots/${slot}`;
  return { dir, kernel: `${dir}/kernel`, initramfs: `${dir}/initramfs`, cmdline: `${dir}/cmdline`, version: `${dir}/version`, failed: `${dir}/failed` } as const;
}

export function storageLayout(root = "/") {
  const esp = join(root, "esp");
  const data = join(root, "data");
  const ephemeral = join(root, "ephemeral");
  return {
    root,
    /** The EFI system partition (FAT): boot files and node configuration. Not encrypted. */
    esp: {
      path: esp,
      /** Node parameters an operator may place here (qemu fw_cfg takes precedence). */
      parameters: join(esp, "nodecore", "parameters.pb"),
      /** Written once the node is part of a cluster; see SealedConfiguration. */
      sealed: join(esp, "nodecore", "sealed.pb"),
      /** Cold-start shares this node holds for other consensus members (internal/coldstart). */
      heldShares: join(esp, "nodecore", "held_shares.pb"),
      /** The NTP servers the node parameters named, one per line, for every later boot (internal/clock). */
      timeServers: join(esp, "nodecore", "time_servers"),
      /** The boot record (ESP_BOOT_RECORD). */
      boot: join(esp, ESP_BOOT_RECORD),
      /** Where a slot's boot files are (espSlotFiles). */
      slot: (slot: Slot) => {
        const files = espSlotFiles(slot);
        return {
          dir: join(esp, files.dir),
          kernel: join(esp, files.kernel),
          initramfs: join(esp, files.initramfs),
          cmdline: join(esp, files.cmdline),
          version: join(esp, files.version),
          /** Why the slot last failed to boot (internal/update), as JSON; written by the node, never read by the slot choice. */
          failed: join(esp, files.failed),
        };
      },
    },
    /** The data partition (ext4 on dm-crypt): everything the node must keep. */
    data: {
      path: data,
      /** Marker written after the first format; its presence means "never format again". */
      formatted: join(data, ".nodecore-formatted"),
      node: {
        path: join(data, "node"),
        /** The node's Ed25519 private key seed. */
        privateKey: join(data, "node", "node.key"),
        /** The node's certificate under the cluster CA (DER). */
        certificate: join(data, "node", "node.crt"),
        /** The cluster CA certificate (DER). */
        caCertificate: join(data, "node", "ca.crt"),
      },
      etcd: {
        path: join(data, "etcd"),
        data: join(data, "etcd", "data"),
      },
      kubernetes: { path: join(data, "kubernetes") },
    },
    /** tmpfs: sockets and runtime files, gone at reboot. */
    ephemeral: {
      path: ephemeral,
      etcd: join(ephemeral, "etcd"),
      curator: join(ephemeral, "curator"),
      /** The Kubernetes components' certificates, keys and kubeconfigs. */
      kubernetes: join(ephemeral, "kubernetes"),
    },
  } as const;
}

export type StorageLayout = ReturnType<typeof storageLayout>;
