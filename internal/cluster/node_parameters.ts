// Reading what the node was given: node parameters (fw_cfg or ESP), with
// every way they can be wrong named. (The sealed configuration has its home
// in localstorage.)

import { MAX_UNLOCK_SHARE_THRESHOLD } from "../coldstart/mod.ts";
import { existsSync, readFileSync } from "node:fs";
import { X509Certificate } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { NodeParametersSchema, type NodeParameters } from "../../proto/gen/api/configuration_pb.ts";
import type { Logger } from "../log/mod.ts";
import { parseBackupHeader, snapshotIntegrity, verifyBackupSignature } from "../backup/mod.ts";
import { timeServersProblem } from "../clock/mod.ts";

/** The qemu fw_cfg entry name (qemu -fw_cfg name=dev.nodecore/parameters.pb,file=...). */
export const FW_CFG_PARAMETERS_NAME = "dev.nodecore/parameters.pb";
/** Where the kernel's qemu_fw_cfg driver shows that entry. */
export const FW_CFG_PARAMETERS_PATH = `/sys/firmware/qemu_fw_cfg/by_name/${FW_CFG_PARAMETERS_NAME}/raw`;

export class ParametersError extends Error {
  override name = "ParametersError";
}

export type ParametersSource = "fw_cfg" | "esp";

/** Node parameters that passed validation, tagged by what they ask for. */
export type ValidParameters =
  | { kind: "bootstrap"; ownerPublicKey: Uint8Array; unlockShareThreshold: number; raw: NodeParameters }
  | { kind: "register"; ticket: Uint8Array; caCertificate: X509Certificate; raw: NodeParameters }
  | { kind: "restore"; ownerPublicKey: Uint8Array; snapshot: Uint8Array; caCertificate: X509Certificate; raw: NodeParameters };

export interface ParameterPaths {
  fwCfg: string;
  esp: string;
}

function parse(bytes: Uint8Array, where: string): NodeParameters {
  if (bytes.length === 0) throw new ParametersError(`node parameters at ${where} are empty`);
  try {
    return fromBinary(NodeParametersSchema, bytes);
  } catch (err) {
    throw new ParametersError(`node parameters at ${where} are corrupt: ${(err as Error).message}`, { cause: err });
  }
}

/** Checks that parameters ask for exactly one thing and carry what it needs. */
export function validateParameters(params: NodeParameters, where: string): ValidParameters {
  const timeProblem = timeServersProblem(params.timeServers);
  if (timeProblem) throw new ParametersError(`node parameters at ${where}: ${timeProblem}`);
  const cluster = params.cluster;
  switch (cluster.case) {
    case "clusterBootstrap": {
      const key = cluster.value.ownerPublicKey;
      if (key.length !== 32) throw new ParametersError(`node parameters at ${where}: bootstrap owner public key must be 32 bytes (ed25519), got ${key.length}`);
      const threshold = cluster.value.unlockShareThreshold;
      if (threshold > MAX_UNLOCK_SHARE_THRESHOLD) {
        throw new ParametersError(`node parameters at ${where}: unlock share threshold ${threshold} is more than ${MAX_UNLOCK_SHARE_THRESHOLD} (0 means a majority)`);
      }
      return { kind: "bootstrap", ownerPublicKey: key, unlockShareThreshold: threshold, raw: params };
    }
    case "clusterRegister": {
      const { registerTicket, caCertificate, clusterDirectory } = cluster.value;
      if (registerTicket.length === 0) throw new ParametersError(`node parameters at ${where}: register ticket is empty`);
      if (!clusterDirectory || clusterDirectory.nodes.length === 0) {
        throw new ParametersError(`node parameters at ${where}: cluster directory lists no nodes to register with`);
      }
      if (!clusterDirectory.nodes.some((n) => n.addresses.some((a) => a.host !== ""))) {
        throw new ParametersError(`node parameters at ${where}: cluster directory has no node addresses`);
      }
      let ca: X509Certificate;
      try {
        ca = new X509Certificate(caCertificate);
      } catch (err) {
        throw new ParametersError(`node parameters at ${where}: CA certificate does not parse: ${(err as Error).message}`, { cause: err });
      }
      return { kind: "register", ticket: registerTicket, caCertificate: ca, raw: params };
    }
    case "clusterRestore": {
      const { ownerPublicKey, snapshot, backupHeader, signature } = cluster.value;
      if (ownerPublicKey.length !== 32) throw new ParametersError(`node parameters at ${where}: restore owner public key must be 32 bytes (ed25519), got ${ownerPublicKey.length}`);
      try {
        snapshotIntegrity(snapshot);
      } catch (err) {
        throw new ParametersError(`node parameters at ${where}: the restore's snapshot is damaged: ${(err as Error).message}`, { cause: err });
      }
      if (cluster.value.caCertificate.length === 0)
        throw new ParametersError(`node parameters at ${where}: the restore names no cluster CA (written by an older ctl): write them again with 'ctl params restore'`);
      let ca: X509Certificate;
      try {
        ca = new X509Certificate(cluster.value.caCertificate);
      } catch (err) {
        throw new ParametersError(`node parameters at ${where}: the restore's CA certificate does not parse: ${(err as Error).message}`, { cause: err });
      }
      // Checked again here, not only by ctl: the backup's signature by that CA.
      if (signature.length > 0 || backupHeader.length > 0) {
        try {
          verifyBackupSignature({ header: parseBackupHeader(backupHeader), headerBytes: Buffer.from(backupHeader), snapshot: Buffer.from(snapshot), signature: Buffer.from(signature) }, ca);
        } catch (err) {
          throw new ParametersError(`node parameters at ${where}: the restore's backup ${(err as Error).message}`, { cause: err });
        }
      }
      return { kind: "restore", ownerPublicKey, snapshot, caCertificate: ca, raw: params };
    }
    case undefined:
      throw new ParametersError(`node parameters at ${where} set neither cluster bootstrap, cluster register nor cluster restore`);
    default: {
      const unreachable: never = cluster;
      throw new ParametersError(`node parameters at ${where}: unknown cluster kind ${JSON.stringify(unreachable)}`);
    }
  }
}

/**
 * Reads the node parameters: qemu fw_cfg wins over the ESP (with a warning
 * when both exist). Throws a ParametersError naming what was looked at when
 * neither exists, and naming the source when it does not parse or validate.
 */
export function readNodeParameters(paths: ParameterPaths, logger: Logger): ValidParameters & { source: ParametersSource } {
  const inFwCfg = existsSync(paths.fwCfg);
  const inEsp = existsSync(paths.esp);
  if (!inFwCfg && !inEsp) {
    throw new ParametersError(`no node parameters: looked in qemu fw_cfg (${paths.fwCfg}) and on the ESP (${paths.esp})`);
  }
  if (inFwCfg && inEsp) logger.warn("node parameters in both fw_cfg and on the ESP; using fw_cfg", { esp: paths.esp });
  const source: ParametersSource = inFwCfg ? "fw_cfg" : "esp";
  const where = inFwCfg ? `fw_cfg (${paths.fwCfg})` : `ESP (${paths.esp})`;
  const params = parse(readFileSync(inFwCfg ? paths.fwCfg : paths.esp), where);
  return { ...validateParameters(params, where), source };
}
