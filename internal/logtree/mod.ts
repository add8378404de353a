// Package logtree: the node's recent logs, kept in memory, one bounded ring
// per component, for the node management service to serve.
//
//   logger.info(...)  (every runnable logs under its dotted path)
//        │  internal/log sink
//        ▼
//   LogTree.append ──▶ ring "root.roleserve.controlplane"          (RING_ENTRIES each)
//                 ──▶ ring "root.roleserve.controlplane.consensus.output"  (a child process's lines)
//                 ──▶ ring "kernel"                                (kernel messages, /dev/kmsg)
//        │
//        ├── backlog(filter, n): the newest n entries of the rings the filter selects, oldest first
//        └── follow(filter, signal): entries as they are appended, until the signal aborts
//
//   filter = { path, subtree, minLevel }:  "" is everything; "a.b" is that ring
//            (and a.b.* with subtree); entries below minLevel are left out.
//
// Invariants:
//  - Memory is bounded: at most MAX_RINGS rings of RING_ENTRIES entries,
//    each message at most MAX_MESSAGE_CHARS and each field value at most
//    MAX_FIELD_CHARS, and MAX_TOTAL_CHARS of text in all. A chatty
//    component evicts its own old entries first; at the total bound, the
//    ring holding the most text gives up its oldest.
//  - Appending never blocks and never throws. A follower that does not keep
//    up loses entries, not memory: its queue is bounded, and it is told how
//    many it lost.
//  - Entries carry a sequence number, so a backlog drawn from many rings
//    comes out in the order the entries were written.

export { LogTree, matches, RING_ENTRIES, MAX_RINGS, MAX_TOTAL_CHARS, MAX_MESSAGE_CHARS, MAX_FIELD_CHARS, FOLLOW_QUEUE_ENTRIES, type LogFilter, type TreeEntry } from "./log_tree.ts";
export { parseKmsgRecord, followKernelMessages, KERNEL_PATH } from "./kmsg.ts";
export {
  BOOTS_KEPT,
  MAX_BYTES as BOOT_LOG_MAX_BYTES,
  PER_PATH as BOOT_LOG_PER_PATH,
  PERSIST_INTERVAL_MS,
  persistBoot,
  readBoot,
  rotateBoots,
  uncleanCause,
  type BootEnd,
  type BootHeader,
  type PastBoot,
} from "./boots.ts";
