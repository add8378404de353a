// Hostile text in every string field of every curator method (Curator,
// Management, AAA), from every kind of caller, against a real one-node
// cluster: each call ends with a status within its deadline, that status's
// message is printable and well-formed whatever it quotes, and the node
// logs no unhandled rejection.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { Status } from "../rpc/mod.ts";
import { answerProblems, callEveryMethod, hostileRounds, stringFields } from "../testing/unicode.ts";
import { startTestCluster, type Credentials, type TestCluster } from "./test_cluster.ts";

let cluster: TestCluster;
const callers: Record<string, Credentials> = {};
const rejections: unknown[] = [];
const onRejection = (reason: unknown) => rejections.push(reason);

beforeAll(async () => {
  process.on("unhandledRejection", onRejection);
  cluster = await startTestCluster();
  const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
  const escrow = await aaa.escrow({});
  aaa.close();
  callers.owner = { kind: "owner", certificate: new X509Certificate(escrow.ownerCertificate), privateKey: cluster.ownerKey.privateKey };
  callers.node = { kind: "node", certificate: cluster.node.certificate, privateKey: cluster.node.key.privateKey };
  callers["a self-signed stranger"] = { kind: "self-signed", key: generateKeyPair() };
}, 120_000);

afterAll(async () => {
  process.off("unhandledRejection", onRejection);
  await cluster?.close();
});

describe("hostile text in every string field", () => {
  test("the fuzzer reaches the fields that quote input (node IDs, labels, statuses)", () => {
    expect(stringFields(Management.method.deleteNode.input)).toContain("id");
    expect(stringFields(Management.method.updateNodeLabels.input)).toEqual(expect.arrayContaining(["id", "upsert.key", "upsert.value", "delete"]));
    expect(stringFields(Curator.method.updateNodeStatus.input)).toEqual(expect.arrayContaining(["node_id", "status.external_address", "status.version", "status.services.message"]));
  });

  for (const service of [Curator, Management, AAA]) {
    test(`${service.name}: every method, from every caller, ends with a printable status within its deadline`, async () => {
      const seen = new Set<string>();
      for (const [who, as] of Object.entries(callers)) {
        const client = cluster.client(service, as);
        try {
          for (const text of hostileRounds(28)) {
            const outcomes = await callEveryMethod(service, client, text);
            expect(answerProblems(outcomes, who)).toEqual([]);
            for (const o of outcomes) seen.add(`${who} ${o.result === "served" ? "served" : Status[o.result]}`);
          }
        } finally {
          client.close();
        }
      }
      // Management serves only the cluster: a stranger is refused for who it is, before any field is read.
      if (service === Management) expect([...seen].filter((s) => s.startsWith("a self-signed stranger"))).toEqual(["a self-signed stranger UNAUTHENTICATED"]);
      expect(rejections).toEqual([]);
    }, 120_000);
  }
});
