// Node labels: Kubernetes label syntax, checked at the edge, and the one
// function that applies a change to a node's labels.
//
//   key   = [prefix "/"] name    prefix: a DNS subdomain (lower case, ≤ 253)
//                                 name:   ≤ 63, alphanumeric at both ends,
//                                         '-', '_', '.' inside
//   value = "" | name-like (≤ 63)

import { create } from "@bufbuild/protobuf";
import { NodeLabelSchema, type NodeLabel } from "../../proto/gen/common/common_pb.ts";
import { InvalidArgumentError, quote } from "../rpc/mod.ts";

/** Labels one node may carry. */
export const MAX_LABELS_PER_NODE = 64;
/** Upserts and deletions one request may carry. */
export const MAX_LABEL_CHANGES = 64;
const MAX_NAME_CHARS = 63;
const MAX_PREFIX_CHARS = 253;
const NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS_SUBDOMAIN = new RegExp(`^${DNS_LABEL}(\\.${DNS_LABEL})*$`);

/** Why `key` is not a label key, or undefined if it is one. */
export function labelKeyProblem(key: string): string | undefined {
  if (key.length === 0) return "is empty";
  const slash = key.indexOf("/");
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== undefined) {
    if (prefix.length === 0) return `${quote(key)}: the prefix before '/' is empty`;
    if (prefix.length > MAX_PREFIX_CHARS) return `${quote(key)}: the prefix is ${prefix.length} characters, more than ${MAX_PREFIX_CHARS}`;
    if (!DNS_SUBDOMAIN.test(prefix)) return `${quote(key)}: the prefix is not a DNS subdomain (lower-case letters, digits, '-', '.')`;
  }
  if (name.length === 0) return `${quote(key)}: the name is empty`;
  if (name.length > MAX_NAME_CHARS) return `${quote(key)}: the name is ${name.length} characters, more than ${MAX_NAME_CHARS}`;
  if (!NAME.test(name)) return `${quote(key)}: the name must be letters, digits, '-', '_' or '.', with a letter or digit at both ends`;
  return undefined;
}

/** Why `value` is not a label value, or undefined if it is one. */
export function labelValueProblem(value: string): string | undefined {
  if (value.length === 0) return undefined;
  if (value.length > MAX_NAME_CHARS) return `${quote(value)} is ${value.length} characters, more than ${MAX_NAME_CHARS}`;
  if (!NAME.test(value)) return `${quote(value)} must be letters, digits, '-', '_' or '.', with a letter or digit at both ends`;
  return undefined;
}

/** Checks a label change request; INVALID_ARGUMENT naming the field at fault. */
export function checkLabelChanges(upsert: readonly NodeLabel[], remove: readonly string[]): void {
  if (upsert.length + remove.length === 0) throw new InvalidArgumentError("nothing to change: give labels to upsert or keys to delete");
  if (upsert.length + remove.length > MAX_LABEL_CHANGES) {
    throw new InvalidArgumentError(`${upsert.length + remove.length} label changes, more than ${MAX_LABEL_CHANGES} in one request`);
  }
  const seen = new Set<string>();
  upsert.forEach((label, i) => {
    const keyProblem = labelKeyProblem(label.key);
    if (keyProblem) throw new InvalidArgumentError(`upsert[${i}].key: ${keyProblem}`);
    const valueProblem = labelValueProblem(label.value);
    if (valueProblem) throw new InvalidArgumentError(`upsert[${i}].value: ${valueProblem}`);
    if (seen.has(label.key)) throw new InvalidArgumentError(`upsert[${i}].key: ${quote(label.key)} is given twice`);
    seen.add(label.key);
  });
  remove.forEach((key, i) => {
    const keyProblem = labelKeyProblem(key);
    if (keyProblem) throw new InvalidArgumentError(`delete[${i}]: ${keyProblem}`);
    if (seen.has(key)) throw new InvalidArgumentError(`delete[${i}]: ${quote(key)} is both upserted and deleted`);
    seen.add(key);
  });
}

/**
 * A node's labels after a change (already checked): upserts replace or add,
 * deletions remove (a missing key is fine); sorted by key. Throws
 * INVALID_ARGUMENT if the node would carry more than MAX_LABELS_PER_NODE.
 */
export function applyLabelChanges(current: readonly NodeLabel[], upsert: readonly NodeLabel[], remove: readonly string[]): NodeLabel[] {
  const labels = new Map(current.map((l) => [l.key, l.value]));
  for (const key of remove) labels.delete(key);
  for (const label of upsert) labels.set(label.key, label.value);
  if (labels.size > MAX_LABELS_PER_NODE) throw new InvalidArgumentError(`the node would carry ${labels.size} labels, more than ${MAX_LABELS_PER_NODE}`);
  return [...labels.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([key, value]) => create(NodeLabelSchema, { key, value }));
}
