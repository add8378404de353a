// What the launcher hands each node through qemu fw_cfg: its NodeParameters
// (dev.nodecore/parameters.pb) and, until the cluster flows derive the data
// partition key, a storage test key (dev.nodecore/storage-test-key).
//
// The owner key is the cluster owner's Ed25519 key: the launcher makes one
// per cluster directory and puts its public half into node 1's bootstrap
// parameters; whoever holds that key (owner/owner.key, where out/ctl looks)
// may take ownership of the cluster.

import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { createPrivateKey, createPublicKey, randomBytes, type KeyObject } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { NodeParameters_ClusterRegisterSchema, NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey } from "../../internal/pki/mod.ts";

/** The fw_cfg names PID 1 reads (internal/cluster: FW_CFG_PARAMETERS_NAME, FW_CFG_STORAGE_TEST_KEY_NAME). */
export const FW_CFG_PARAMETERS = "dev.nodecore/parameters.pb";
export const FW_CFG_STORAGE_TEST_KEY = "dev.nodecore/storage-test-key";
export const STORAGE_TEST_KEY_BYTES = 32;

/** What a node is told to do. */
export type NodeParametersSpec =
  /** Create a new cluster owned by the launcher's owner key (node 1's default). */
  | { kind: "bootstrap" }
  /**
   * Register into a running cluster. The ticket must come from that cluster's
   * curator (Management.GetRegisterTicket), so the launcher cannot make one
   * up: whoever has it passes it here.
   */
  | { kind: "register"; register: MessageInitShape<typeof NodeParameters_ClusterRegisterSchema> }
  /**
   * Register parameters that exist only once the cluster runs: formCluster()
   * (cluster_formation.ts) fetches them with out/ctl and writes them before
   * it starts the node (nodes 2..N by default).
   */
  | { kind: "register-later" }
  /** Exactly these bytes as parameters.pb (tests: corrupt parameters). */
  | { kind: "raw"; bytes: Uint8Array }
  /** No parameters at all in fw_cfg. */
  | { kind: "none" };

export interface OwnerKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** The 32 raw bytes that go into bootstrap parameters. */
  publicKeyRaw: Uint8Array;
  pemPath: string;
}

/** The cluster's owner key from pemPath, generated (and saved, mode 0600) if the file does not exist. */
export function loadOrCreateOwnerKey(pemPath: string): OwnerKey {
  let privateKey: KeyObject;
  if (existsSync(pemPath)) {
    privateKey = createPrivateKey(readFileSync(pemPath));
    if (privateKey.asymmetricKeyType !== "ed25519") throw new Error(`owner key ${pemPath} is ${privateKey.asymmetricKeyType}, not ed25519`);
  } else {
    privateKey = generateKeyPair().privateKey;
    writeFileSync(pemPath, privateKeyPem(privateKey), { mode: 0o600 });
  }
  const publicKey = createPublicKey(privateKey);
  return { privateKey, publicKey, publicKeyRaw: rawPublicKey(publicKey), pemPath };
}

/** The parameters.pb bytes for a spec; undefined when the node gets none. */
export function encodeNodeParameters(spec: NodeParametersSpec, owner: OwnerKey): Uint8Array | undefined {
  switch (spec.kind) {
    case "bootstrap":
      return toBinary(NodeParametersSchema, create(NodeParametersSchema, { cluster: { case: "clusterBootstrap", value: { ownerPublicKey: owner.publicKeyRaw } } }));
    case "register":
      return toBinary(NodeParametersSchema, create(NodeParametersSchema, { cluster: { case: "clusterRegister", value: spec.register } }));
    case "raw":
      return spec.bytes;
    case "none":
    case "register-later":
      return undefined;
    default: {
      const unreachable: never = spec;
      throw new Error(`unknown node parameters kind ${JSON.stringify(unreachable)}`);
    }
  }
}

/** The node's storage test key from path, generated (mode 0600) if missing, so that reboots reuse it. */
export function loadOrCreateStorageTestKey(path: string): Uint8Array {
  if (existsSync(path)) {
    const key = new Uint8Array(readFileSync(path));
    if (key.length !== STORAGE_TEST_KEY_BYTES) throw new Error(`storage test key ${path} has ${key.length} bytes, want ${STORAGE_TEST_KEY_BYTES}`);
    return key;
  }
  const key = new Uint8Array(randomBytes(STORAGE_TEST_KEY_BYTES));
  writeFileSync(path, key, { mode: 0o600 });
  return key;
}
