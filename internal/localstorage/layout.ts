// The declared tree of the node's storage: every file and directory the node
// core uses, by name, under one root ("/" on a node, a temporary directory in
// tests). Code asks the layout for a path instead of building one.

import { join } from "node:path";

/** GPT partition names the image builder gives the node's partitions. */
export const ESP_PARTITION_NAME = "ESP";
export const DATA_PARTITION_NAME = "DATA";
/** The device-mapper name of the unlocked data partition. */
export const DATA_MAPPER_NAME = "data";

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
