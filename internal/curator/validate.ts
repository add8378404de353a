// Checks of every free-form field a caller sends, at the edge, before
// anything is stored or acted on. A refusal is INVALID_ARGUMENT naming the
// field and what is wrong with it.
//
// What a node reports about itself ends up in etcd, in every watcher's
// stream and on the owner's terminal, so strings are bounded and printable
// (no control, formatting or bidirectional characters that could rewrite
// a terminal line), addresses are IP addresses, lists are bounded.

import { x25519 } from "@noble/curves/ed25519.js";
import { isIP } from "node:net";
import { create } from "@bufbuild/protobuf";
import { NodeStatusSchema, ServiceStatusSchema, UpdateFailureSchema, type NodeStatus } from "../../proto/gen/common/common_pb.ts";
import type { BackupStatus, BackupTaken } from "../../proto/gen/api/management_pb.ts";
import { canonicalIp, isCanonicalEd25519PublicKey, NODE_ID_PATTERN } from "../pki/mod.ts";
import { firstUnprintable, fitted, InvalidArgumentError, isLoopback, PermissionDeniedError, quote } from "../rpc/mod.ts";

/** Service entries one node may report. */
export const MAX_SERVICES = 64;
export const MAX_VERSION_CHARS = 64;
/** An update failure's reason, as a node reports it. */
export const MAX_UPDATE_FAILURE_CHARS = 512;
export const MAX_SERVICE_NAME_CHARS = 64;
export const MAX_SERVICE_STATE_CHARS = 32;
export const MAX_SERVICE_MESSAGE_CHARS = 512;
/** A status timestamp may be ahead of the curator's clock by this much (clock skew), no more. */
export const MAX_TIMESTAMP_SKEW_MS = 24 * 3600 * 1000;
/** Why a scheduled backup failed, as its node reports it (what the node cut it to, and made printable). */
export const MAX_BACKUP_ERROR_CHARS = 1024;
/** A backup file's path on its node, and where its HTTP target received it. */
export const MAX_BACKUP_PATH_CHARS = 4096;
/** Register tickets are this long at most (they are 32 bytes). */
export const MAX_TICKET_BYTES = 64;

/** Names of services and states: lower-case words. */
const TOKEN = /^[a-z0-9][a-z0-9._-]*$/;

function invalid(field: string, problem: string): never {
  throw new InvalidArgumentError(`${field}: ${problem}`);
}

/** A bounded string of printable characters. */
export function checkPrintable(field: string, value: string, maxChars: number): void {
  if (value.length > maxChars) invalid(field, `${value.length} characters, more than ${maxChars}`);
  const bad = firstUnprintable(value);
  if (bad) invalid(field, `contains an unprintable character (U+${bad.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")})`);
}

function checkToken(field: string, value: string, maxChars: number): void {
  if (value.length === 0) invalid(field, "is empty");
  if (value.length > maxChars) invalid(field, `${value.length} characters, more than ${maxChars}`);
  if (!TOKEN.test(value)) invalid(field, `${quote(value)} is not a name (lower-case letters, digits, '.', '_', '-')`);
}

/** A metrics reader's name (its certificate's CN). */
export function checkReaderName(field: string, value: string): void {
  checkToken(field, value, 64);
}

/** A node ID as the cluster makes them. */
export function checkNodeId(field: string, value: string): void {
  if (!NODE_ID_PATTERN.test(value)) invalid(field, `${quote(value, 40)} is not a node ID (node- and 16 hex digits)`);
}

/** A unicast IP address, as other nodes will dial it. */
export function checkAddress(field: string, value: string): void {
  if (value.length > 45 || isIP(value) === 0) invalid(field, `${quote(value, 60)} is not an IP address`);
  if (value === "0.0.0.0" || value === "::" || value === "255.255.255.255") invalid(field, `${value} is not an address other nodes can reach`);
}

/**
 * An address a node reports as its own, held against the address its call
 * came from (which the TCP handshake proves): the same address, or, when
 * both are loopback addresses, the same machine (node processes on one
 * host, each on an address of its own; they dial from it too since
 * rpc/dial_from.ts, and the loopback case is kept because on one host every
 * process can bind any loopback address anyway). So no node
 * can make the others, the owner's ctl or etcd dial an address of its choosing.
 */
export function checkAddressProven(field: string, reported: string, source: string | undefined): void {
  if (source === undefined) throw new PermissionDeniedError(`${field}: the curator cannot see the address this call came from, so it cannot take ${quote(reported, 60)} as this node's`);
  if (canonicalIp(reported) === canonicalIp(source)) return;
  if (isLoopback(reported) && isLoopback(source)) return;
  throw new PermissionDeniedError(`${field}: ${quote(reported, 60)} is not the address this call came from (${source}); a node reports the address it dials the cluster from`);
}

/** A 32-byte Ed25519 public key that a real private key could have made. */
export function checkPublicKey(field: string, value: Uint8Array): void {
  if (value.length !== 32) invalid(field, `must be 32 bytes (ed25519), got ${value.length}`);
  if (!isCanonicalEd25519PublicKey(value)) invalid(field, "is not a canonical ed25519 public key");
}

/**
 * A WireGuard public key: 32 bytes that are a Curve25519 point of large
 * order. A low-order point (the all-zero key among them) would give every
 * peer a shared secret known to anyone; the test is the one WireGuard makes,
 * a Diffie-Hellman with a throwaway key whose result must not be all zeros.
 */
export function checkWireguardKey(field: string, value: Uint8Array): void {
  if (value.length !== 32) invalid(field, `must be 32 bytes (a Curve25519 public key), got ${value.length}`);
  let shared: Uint8Array;
  try {
    shared = x25519.getSharedSecret(x25519.utils.randomSecretKey(), value);
  } catch {
    invalid(field, "is not a valid Curve25519 public key (a low-order point)");
  }
  if (shared.every((b) => b === 0)) invalid(field, "is not a valid Curve25519 public key (a low-order point)");
}

/**
 * A node's status made to fit checkNodeStatus's bounds before the node
 * sends it: every free-form string printable and cut to its field's
 * length, the services list cut to MAX_SERVICES. A service whose message
 * quotes a long error (a component's last lines) is shortened, not the
 * reason the whole status is refused and never reaches the cluster.
 * Names, states and addresses are the node's own words; they are kept.
 */
export function fitNodeStatus(status: NodeStatus): NodeStatus {
  return create(NodeStatusSchema, {
    ...status,
    version: fitted(status.version, MAX_VERSION_CHARS),
    kubernetesVersion: fitted(status.kubernetesVersion, MAX_VERSION_CHARS),
    services: status.services.slice(0, MAX_SERVICES).map((s) => create(ServiceStatusSchema, { ...s, message: fitted(s.message, MAX_SERVICE_MESSAGE_CHARS) })),
    ...(status.updateFailure
      ? {
          updateFailure: create(UpdateFailureSchema, {
            ...status.updateFailure,
            version: fitted(status.updateFailure.version, MAX_VERSION_CHARS),
            reason: fitted(status.updateFailure.reason, MAX_UPDATE_FAILURE_CHARS),
          }),
        }
      : {}),
  });
}

/** Everything a node may say about itself. */
export function checkNodeStatus(status: NodeStatus, now = Date.now()): void {
  checkAddress("status.external_address", status.externalAddress);
  if (status.runningCurator) {
    const port = status.runningCurator.port;
    if (!Number.isInteger(port) || port < 1 || port > 65535) invalid("status.running_curator.port", `${port} is not a port (1-65535)`);
  }
  const timestamp = status.timestampMs;
  if (timestamp <= 0n || timestamp > BigInt(now + MAX_TIMESTAMP_SKEW_MS)) {
    invalid("status.timestamp_ms", `${timestamp} is not a time between the epoch and a day from now`);
  }
  if (status.bootMs < 0n || status.bootMs > BigInt(now + MAX_TIMESTAMP_SKEW_MS)) {
    invalid("status.boot_ms", `${status.bootMs} is not a time between the epoch and a day from now`);
  }
  checkPrintable("status.version", status.version, MAX_VERSION_CHARS);
  checkPrintable("status.kubernetes_version", status.kubernetesVersion, MAX_VERSION_CHARS);
  if (status.slot !== "" && status.slot !== "a" && status.slot !== "b") invalid("status.slot", `${quote(status.slot)} is not a slot (a, b, or empty)`);
  if (status.updateFailure) {
    checkPrintable("status.update_failure.version", status.updateFailure.version, MAX_VERSION_CHARS);
    checkPrintable("status.update_failure.reason", status.updateFailure.reason, MAX_UPDATE_FAILURE_CHARS);
    const at = status.updateFailure.timeMs;
    if (at < 0n || at > BigInt(now + MAX_TIMESTAMP_SKEW_MS)) invalid("status.update_failure.time_ms", `${at} is not a time between the epoch and a day from now`);
  }
  if (status.services.length > MAX_SERVICES) invalid("status.services", `${status.services.length} entries, more than ${MAX_SERVICES}`);
  const names = new Set<string>();
  status.services.forEach((service, i) => {
    const field = `status.services[${i}]`;
    checkToken(`${field}.name`, service.name, MAX_SERVICE_NAME_CHARS);
    if (names.has(service.name)) invalid(`${field}.name`, `${quote(service.name)} is listed twice`);
    names.add(service.name);
    checkToken(`${field}.state`, service.state, MAX_SERVICE_STATE_CHARS);
    checkPrintable(`${field}.message`, service.message, MAX_SERVICE_MESSAGE_CHARS);
  });
}

/** What the scheduled backups' node reports about them (Curator.ReportBackupStatus). */
export function checkBackupStatus(status: BackupStatus, now = Date.now()): void {
  const taken = (field: string, t: BackupTaken | undefined) => {
    if (!t) return;
    checkPrintable(`${field}.file`, t.file, MAX_BACKUP_PATH_CHARS);
    checkPrintable(`${field}.uploaded_to`, t.uploadedTo, MAX_BACKUP_PATH_CHARS);
    if (t.timeMs < 0n || t.timeMs > BigInt(now + MAX_TIMESTAMP_SKEW_MS)) invalid(`${field}.time_ms`, `${t.timeMs} is not a time between the epoch and a day from now`);
    if (t.etcdRevision < 0n) invalid(`${field}.etcd_revision`, `${t.etcdRevision} is negative`);
  };
  taken("status.last", status.last);
  taken("status.last_verified", status.lastVerified);
  taken("status.last_uploaded", status.lastUploaded);
  checkPrintable("status.last_error", status.lastError, MAX_BACKUP_ERROR_CHARS);
  if (status.lastErrorMs < 0n || status.lastErrorMs > BigInt(now + MAX_TIMESTAMP_SKEW_MS)) invalid("status.last_error_ms", `${status.lastErrorMs} is not a time between the epoch and a day from now`);
}
