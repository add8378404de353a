import { describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { NodeSchema, Node_Health } from "../../proto/gen/api/management_pb.ts";
import { LogEntrySchema, LogLevel } from "../../proto/gen/api/node_management_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { describeNode, formatDuration, nodeTable, parseLabelArgs, summarize } from "./format.ts";
import { formatLogEntry, logEntryJson, serviceTable } from "./node_management.ts";

describe("how ctl shows a node's day-2 state", () => {
  test("durations read as people read them", () => {
    expect([850, 12_300, 250_000, 3 * 3_600_000 + 120_000, 2 * 86_400_000 + 4 * 3_600_000].map(formatDuration)).toEqual(["850ms", "12s", "4m10s", "3h02m", "2d04h"]);
  });

  test("the services table has a row per runnable, the last error last, and '-' for none", () => {
    const table = serviceTable([
      { path: "root", state: "healthy", restarts: 0, lastError: "", sinceMs: 65_000 },
      { path: "root.roleserve.controlplane", state: "dead", restarts: 3, lastError: "/usr/bin/etcd was killed by SIGKILL", sinceMs: 400 },
    ]);
    expect(table.split("\n")).toEqual([
      "SERVICE                      STATE    RESTARTS  SINCE  LAST ERROR",
      "root                         healthy  0         1m05s  -",
      "root.roleserve.controlplane  dead     3         400ms  /usr/bin/etcd was killed by SIGKILL",
    ]);
  });

  test("the node list shows health and how long ago the leader heard from each node", () => {
    const nodes = [
      create(NodeSchema, {
        id: "node-a",
        state: NodeState.UP,
        health: Node_Health.HEALTHY,
        timeSinceHeartbeatMs: 2_400n,
        status: { externalAddress: "10.0.0.2" },
        labels: [
          { key: "zone", value: "a" },
          { key: "rack", value: "" },
        ],
      }),
      create(NodeSchema, { id: "node-b", state: NodeState.UP, health: Node_Health.HEARTBEAT_TIMEOUT, timeSinceHeartbeatMs: 31_000n }),
      create(NodeSchema, { id: "node-c", state: NodeState.NEW }),
    ].map(summarize);
    expect(nodeTable(nodes).split("\n")).toEqual([
      "NODE    STATE  HEALTH             LAST SEEN  ADDRESS   ROLES  LABELS",
      "node-a  UP     HEALTHY            2s ago     10.0.0.2  -      zone=a,rack=",
      "node-b  UP     HEARTBEAT_TIMEOUT  31s ago    -         -      -",
      "node-c  NEW    UNKNOWN            -          -         -      -",
    ]);
  });

  test("describe shows one node's record, then each service line it reports with its state and message", () => {
    const now = 1_000_000_000_000;
    const node = summarize(
      create(NodeSchema, {
        id: "node-a",
        state: NodeState.UP,
        health: Node_Health.HEALTHY,
        timeSinceHeartbeatMs: 2_000n,
        clockOffsetMs: -340n,
        roles: { kubernetesWorker: {} },
        status: {
          version: "0.1.0+abc1234",
          kubernetesVersion: "v1.37.2",
          externalAddress: "10.0.0.2",
          bootMs: BigInt(now - 600_000),
          timestampMs: BigInt(now - 5_000),
          services: [
            { name: "clusternet", state: "running", message: "nodecore-wg 10.244.0.0/24; 1 peer: node-b 10.244.1.0/24 (handshake current)" },
            { name: "kube-proxy", state: "running", message: "" },
          ],
        },
      }),
    );
    expect(describeNode(node, now).split("\n")).toEqual([
      "Node:        node-a",
      "State:       UP",
      "Health:      HEALTHY",
      "Last seen:   2s ago",
      "Clock:       within 1s of the curator leader's (-340ms)",
      "Address:     10.0.0.2",
      "Roles:       kubernetes-worker",
      "Curator:     -",
      "Labels:      -",
      "Version:     0.1.0+abc1234",
      "Kubernetes:  v1.37.2",
      "Booted:      2001-09-09T01:36:40.000Z (up 10m00s)",
      "Status from: 5s ago",
      "",
      "Services:",
      "  clusternet  running  nodecore-wg 10.244.0.0/24; 1 peer: node-b 10.244.1.0/24 (handshake current)",
      "  kube-proxy  running",
    ]);
  });

  test("label arguments: key=value sets (the value may be empty), key- removes, anything else is refused", () => {
    expect(parseLabelArgs(["zone=a", "rack=", "old-", "example.com/x=y=z"])).toEqual({
      upsert: [
        { key: "zone", value: "a" },
        { key: "rack", value: "" },
        { key: "example.com/x", value: "y=z" },
      ],
      remove: ["old"],
    });
    for (const bad of ["zone", "=a", "-", ""]) expect(() => parseLabelArgs([bad])).toThrow(`'${bad}' is neither key=value`);
  });

  test("a log entry prints like the node's console, or as one JSON object", () => {
    const entry = create(LogEntrySchema, {
      path: "root.roleserve",
      timeMs: BigInt(Date.UTC(2026, 10, 23, 12, 0, 1, 234)),
      level: LogLevel.WARN,
      message: "heartbeat stream failed",
      fields: [{ key: "reason", value: "no answer" }],
    });
    expect(formatLogEntry(entry)).toBe('12:00:01.234 W root.roleserve heartbeat stream failed reason="no answer"');
    expect(logEntryJson(entry)).toEqual({ time: "2026-11-23T12:00:01.234Z", level: "warn", path: "root.roleserve", msg: "heartbeat stream failed", fields: { reason: "no answer" } });
  });
});
