// Cold-start shares: splitting and combining through the library, both
// layers refusing what does not belong, the holder's file, and the
// ShareHolder service over real mutual TLS on loopback with join
// certificates from a real cluster CA.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { createPublicKey, randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { SealedConfigurationSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import { ClusterDirectorySchema, type ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { ShareHolder } from "../../proto/gen/coldstart/coldstart_pb.ts";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { storageLayout } from "../localstorage/mod.ts";
import { generateKeyPair, issueJoinCertificate, issueNodeCertificate, nodeIdFromPublicKey, privateKeyFromRaw, rawPublicKey, selfSignedCertificate } from "../pki/mod.ts";
import { RpcError, Status } from "../rpc/mod.ts";
import { supervise, type Supervisor } from "../supervisor/mod.ts";
import { eventually, freePort, tempDir, testCA } from "../testing/mod.ts";
import { answerProblems, callEveryMethod, hostileRounds } from "../testing/unicode.ts";
import { openWrapped } from "./shares.ts";
import { describeColdStart } from "./threshold.ts";
import {
  combineShares,
  defaultThreshold,
  dialShareHolder,
  dropShares,
  effectiveThreshold,
  gatherShares,
  holdShare,
  openAsHolder,
  readHeldShares,
  shareHolderRunnable,
  splitClusterHalf,
  ShareError,
  type Holder,
} from "./mod.ts";
import { fromBinary } from "@bufbuild/protobuf";
import { WrappedShareSchema } from "../../proto/gen/coldstart/coldstart_pb.ts";

function joinKeyPair() {
  const seed = new Uint8Array(randomBytes(32));
  const privateKey = privateKeyFromRaw(seed);
  const publicKey = createPublicKey(privateKey);
  return { seed, privateKey, publicKey, raw: rawPublicKey(publicKey) };
}

function member() {
  const nodeKey = generateKeyPair();
  const id = nodeIdFromPublicKey(rawPublicKey(nodeKey.publicKey));
  return { id, nodeKey, join: joinKeyPair(), nodeUnlockKey: new Uint8Array(randomBytes(32)) };
}

const owner = member();
const holders = [member(), member(), member()];
const asHolders = (list: typeof holders): Holder[] => list.map((h) => ({ id: h.id, joinKey: h.join.raw }));
const clusterHalf = new Uint8Array(randomBytes(32));

/** What `holder` hands back for the owner: the inner layer of its sealed share. */
function handBack(sealed: { holder: string; sealedShare: Uint8Array }) {
  const holder = holders.find((h) => h.id === sealed.holder)!;
  const wrapped = fromBinary(WrappedShareSchema, openAsHolder(holder.join.seed, owner.id, holder.id, sealed.sealedShare));
  return openWrapped(owner.nodeUnlockKey, owner.id, holder.id, wrapped);
}

describe("thresholds", () => {
  test("the default is a majority of the other members, at least 1; a configured one is capped at the holders", () => {
    expect([1, 2, 3, 4, 5].map(defaultThreshold)).toEqual([1, 2, 2, 3, 3]);
    expect(effectiveThreshold(0, 4)).toBe(3);
    expect(effectiveThreshold(1, 4)).toBe(1);
    expect(effectiveThreshold(9, 2)).toBe(2);
  });
});

describe("splitting and combining", () => {
  test("any 2 of 3 shares give the cluster half back; 1 is not enough", async () => {
    const sealed = await splitClusterHalf({ clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders(holders), threshold: 2, epoch: 4n });
    expect(sealed.map((s) => s.holder)).toEqual(holders.map((h) => h.id));
    const bodies = sealed.map(handBack);
    for (const pair of [
      [0, 1],
      [0, 2],
      [1, 2],
    ]) {
      const result = await combineShares(pair.map((i) => bodies[i]!));
      expect(result).toEqual({ kind: "combined", clusterHalf, epoch: 4n });
    }
    expect(await combineShares([bodies[1]!])).toEqual({ kind: "short", have: 1, need: 2 });
    // The same share twice is still one share.
    expect(await combineShares([bodies[1]!, bodies[1]!])).toEqual({ kind: "short", have: 1, need: 2 });
  });

  test("a cluster half that arrived as a Buffer (from the wire or the disk) splits and combines too", async () => {
    const fromWire = Buffer.from(clusterHalf);
    const sealed = await splitClusterHalf({ clusterHalf: fromWire, nodeUnlockKey: Buffer.from(owner.nodeUnlockKey), owner: owner.id, holders: asHolders(holders), threshold: 2, epoch: 2n });
    const bodies = sealed.map(handBack).map((b) => ({ ...b, share: Buffer.from(b.share) }));
    expect(await combineShares(bodies.slice(1))).toEqual({ kind: "combined", clusterHalf, epoch: 2n });
  });

  test("with a threshold of 1 each share opens the key alone", async () => {
    const sealed = await splitClusterHalf({ clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders(holders.slice(0, 1)), threshold: 1, epoch: 1n });
    expect(await combineShares([handBack(sealed[0]!)])).toEqual({ kind: "combined", clusterHalf, epoch: 1n });
  });

  test("shares of two different splits are never combined", async () => {
    const options = { clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders(holders), threshold: 2, epoch: 7n };
    const first = await splitClusterHalf(options);
    const second = await splitClusterHalf(options);
    expect(await combineShares([handBack(first[0]!), handBack(second[1]!)])).toEqual({ kind: "short", have: 1, need: 2 });
  });

  test("a share sealed to one holder does not open for another", async () => {
    const [toFirst] = await splitClusterHalf({ clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders(holders), threshold: 2, epoch: 1n });
    expect(() => openAsHolder(holders[1]!.join.seed, owner.id, holders[0]!.id, toFirst!.sealedShare)).toThrow(ShareError);
    // Nor for the right key under another holder's name, or another owner's.
    expect(() => openAsHolder(holders[0]!.join.seed, owner.id, holders[1]!.id, toFirst!.sealedShare)).toThrow(ShareError);
    expect(() => openAsHolder(holders[0]!.join.seed, holders[2]!.id, holders[0]!.id, toFirst!.sealedShare)).toThrow(ShareError);
  });

  test("a tampered share is refused, in either layer", async () => {
    const [sealed] = await splitClusterHalf({ clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders(holders), threshold: 2, epoch: 1n });
    const outer = new Uint8Array(sealed!.sealedShare);
    outer[outer.length - 3]! ^= 1;
    expect(() => openAsHolder(holders[0]!.join.seed, owner.id, holders[0]!.id, outer)).toThrow(/does not open/);
    const wrapped = fromBinary(WrappedShareSchema, openAsHolder(holders[0]!.join.seed, owner.id, holders[0]!.id, sealed!.sealedShare));
    wrapped.ciphertext[5]! ^= 1;
    expect(() => openWrapped(owner.nodeUnlockKey, owner.id, holders[0]!.id, wrapped)).toThrow(/does not open/);
  });

  test("a share handed back under another holder's name, or opened with another node's key, is refused", async () => {
    const [sealed] = await splitClusterHalf({ clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders(holders), threshold: 2, epoch: 1n });
    const wrapped = fromBinary(WrappedShareSchema, openAsHolder(holders[0]!.join.seed, owner.id, holders[0]!.id, sealed!.sealedShare));
    expect(() => openWrapped(owner.nodeUnlockKey, owner.id, holders[1]!.id, wrapped)).toThrow(ShareError);
    expect(() => openWrapped(holders[2]!.nodeUnlockKey, owner.id, holders[0]!.id, wrapped)).toThrow(ShareError);
  });
});

describe("the holder's file", () => {
  test("keeps, per owner, the committed split and the newest, and drops owners on request", async () => {
    using dir = tempDir();
    const path = join(dir.path, "held.pb");
    const bytes = (n: number) => new Uint8Array([n]);
    await holdShare(path, { owner: "node-a", epoch: 1n, committedEpoch: 0n, sealedShare: bytes(1) });
    await holdShare(path, { owner: "node-b", epoch: 1n, committedEpoch: 0n, sealedShare: bytes(9) });
    await holdShare(path, { owner: "node-a", epoch: 2n, committedEpoch: 1n, sealedShare: bytes(2) });
    await holdShare(path, { owner: "node-a", epoch: 3n, committedEpoch: 1n, sealedShare: bytes(3) });
    const epochsOf = (who: string) =>
      readHeldShares(path)
        .shares.filter((s) => s.owner === who)
        .map((s) => Number(s.epoch));
    expect(epochsOf("node-a")).toEqual([1, 3]);
    await holdShare(path, { owner: "node-a", epoch: 3n, committedEpoch: 3n, sealedShare: bytes(3) });
    expect(epochsOf("node-a")).toEqual([3]);
    expect(await dropShares(path, (o) => o !== "node-b")).toEqual(["node-b"]);
    expect(epochsOf("node-b")).toEqual([]);
    expect(epochsOf("node-a")).toEqual([3]);
  });

  test("a file that cannot be read (a directory here; EIO on a damaged ESP) is an error naming it", () => {
    using dir = tempDir();
    const path = join(dir.path, "held.pb");
    mkdirSync(path);
    expect(() => readHeldShares(path)).toThrow(`the held shares file ${path} could not be read (`);
  });
});

describe("the ShareHolder service", () => {
  const ca = testCA();
  const holder = holders[0]!;
  const stranger = member();
  const dir = tempDir();
  const layout = storageLayout(dir.path);
  const directory = new Value<ClusterDirectory>();
  const sealedValue = new Value<SealedConfiguration>();
  let port = 0;
  let supervisor: Supervisor;
  const nodeTls = (m: ReturnType<typeof member>) => ({ ca: ca.certificate, certificate: issueNodeCertificate(ca, m.nodeKey.publicKey), privateKey: m.nodeKey.privateKey });
  const joinTls = (m: ReturnType<typeof member>, name = m.id) => ({ ca: ca.certificate, certificate: issueJoinCertificate(ca, m.join.publicKey, name), privateKey: m.join.privateKey });

  beforeAll(async () => {
    port = await freePort();
    directory.set(
      create(ClusterDirectorySchema, {
        nodes: [owner, holder].map((m) => ({ publicKey: rawPublicKey(m.nodeKey.publicKey), joinKey: m.join.raw, addresses: [{ host: "127.0.0.1" }] })),
      }),
    );
    sealedValue.set(
      create(SealedConfigurationSchema, {
        nodeUnlockKey: holder.nodeUnlockKey,
        joinKey: holder.join.seed,
        clusterCa: new Uint8Array(ca.certificate.raw),
        joinCertificate: new Uint8Array(issueJoinCertificate(ca, holder.join.publicKey, holder.id).raw),
      }),
    );
    const { logger } = captureLogger("root");
    supervisor = supervise(shareHolderRunnable({ layout, address: async () => "127.0.0.1", sealed: sealedValue, directory, port }), { logger });
    await eventually(() => expect(supervisor.dump().every((s) => s.state === "healthy")).toBe(true));
  });

  afterAll(async () => {
    await supervisor.stop();
    dir[Symbol.dispose]();
  });

  async function refused(promise: Promise<unknown>): Promise<RpcError> {
    try {
      await promise;
    } catch (err) {
      if (err instanceof RpcError) return err;
      throw err;
    }
    throw new Error("the call was not refused");
  }

  test("a consensus member leaves a share, and gets it back at a cold start with its join certificate", async () => {
    const [sealed] = await splitClusterHalf({ clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders([holder]), threshold: 1, epoch: 1n });
    const client = dialShareHolder(holder.id, "127.0.0.1", nodeTls(owner), port);
    try {
      await eventually(async () => client.holdShare({ epoch: 1n, committedEpoch: 0n, sealedShare: sealed!.sealedShare }));
    } finally {
      client.close();
    }
    const gathered = await gatherShares({
      ownId: owner.id,
      nodeUnlockKey: owner.nodeUnlockKey,
      peers: [{ id: holder.id, host: "127.0.0.1", joinKey: holder.join.raw }],
      tls: joinTls(owner),
      port,
      signal: AbortSignal.timeout(10_000),
    });
    expect(gathered.failed).toEqual([]);
    expect(gathered.result).toEqual({ kind: "combined", clusterHalf, epoch: 1n });
  });

  test("a node that is not a consensus member cannot leave shares", async () => {
    const [sealed] = await splitClusterHalf({ clusterHalf, nodeUnlockKey: stranger.nodeUnlockKey, owner: stranger.id, holders: asHolders([holder]), threshold: 1, epoch: 1n });
    const client = dialShareHolder(holder.id, "127.0.0.1", nodeTls(stranger), port);
    try {
      const err = await refused(client.holdShare({ epoch: 1n, sealedShare: sealed!.sealedShare }));
      expect(err.code).toBe(Status.PERMISSION_DENIED);
      expect(err.details).toContain("not a consensus member");
    } finally {
      client.close();
    }
  });

  test("a share not sealed to the holder is refused when it is left, not when it is needed", async () => {
    const [toOther] = await splitClusterHalf({ clusterHalf, nodeUnlockKey: owner.nodeUnlockKey, owner: owner.id, holders: asHolders([holders[1]!]), threshold: 1, epoch: 2n });
    const client = dialShareHolder(holder.id, "127.0.0.1", nodeTls(owner), port);
    try {
      const err = await refused(client.holdShare({ epoch: 2n, committedEpoch: 1n, sealedShare: toOther!.sealedShare }));
      expect(err.code).toBe(Status.INVALID_ARGUMENT);
      expect(err.details).toContain("not sealed to this node's join key");
    } finally {
      client.close();
    }
  });

  test("shares go only to the node's own join certificate", async () => {
    const ask = async (tls: ReturnType<typeof joinTls>) => {
      const client = dialShareHolder(holder.id, "127.0.0.1", tls, port);
      try {
        return await refused(client.getShares({ nodeId: owner.id }, { timeoutMs: 5_000 }));
      } finally {
        client.close();
      }
    };
    // Another node's join certificate, even one under the cluster CA.
    const other = await ask(joinTls(stranger));
    expect(other.code).toBe(Status.PERMISSION_DENIED);
    expect(other.details).toContain(`this is node ${stranger.id}'s join certificate, not node ${owner.id}'s`);
    // The owner's own node certificate is not a join certificate.
    const node = await ask(nodeTls(owner));
    expect(node.code).toBe(Status.PERMISSION_DENIED);
    // A self-signed certificate for the owner's join key proves the key, not the name.
    const selfSigned = await ask({ ca: ca.certificate, certificate: selfSignedCertificate(owner.join), privateKey: owner.join.privateKey });
    expect(selfSigned.code).toBe(Status.UNAUTHENTICATED);
    // The caller is checked before any field: a stranger's bad node ID (an
    // emoji straddling the quoted length) gets the refusal of the caller.
    const client = dialShareHolder(holder.id, "127.0.0.1", { ca: ca.certificate, certificate: selfSignedCertificate(owner.join), privateKey: owner.join.privateKey }, port);
    try {
      const bad = await refused(client.getShares({ nodeId: `${"x".repeat(39)}\u{1f600}` }, { timeoutMs: 5_000 }));
      expect(bad.code).toBe(Status.UNAUTHENTICATED);
    } finally {
      client.close();
    }
  });

  test("the client refuses a server that is not the holder it meant to reach", async () => {
    const client = dialShareHolder(holders[1]!.id, "127.0.0.1", joinTls(owner), port);
    try {
      const err = await refused(client.getShares({ nodeId: owner.id }, { timeoutMs: 5_000 }));
      expect(err.code).toBe(Status.UNAVAILABLE);
      expect(err.details).toContain(`expected node ${holders[1]!.id}'s join certificate`);
    } finally {
      client.close();
    }
  });

  test("an owner releases the shares a holder keeps for it, and only its own", async () => {
    const before = readHeldShares(layout.esp.heldShares).shares.map((s) => s.owner);
    expect(before).toContain(owner.id);
    const client = dialShareHolder(holder.id, "127.0.0.1", nodeTls(owner), port);
    try {
      await client.releaseShares({});
    } finally {
      client.close();
    }
    expect(readHeldShares(layout.esp.heldShares).shares.map((s) => s.owner)).not.toContain(owner.id);
    const asking = dialShareHolder(holder.id, "127.0.0.1", joinTls(owner), port);
    try {
      const err = await refused(asking.getShares({ nodeId: owner.id }, { timeoutMs: 5_000 }));
      expect(err.code).toBe(Status.NOT_FOUND);
    } finally {
      asking.close();
    }
  });

  test("hostile text in every string field of every method, from every kind of caller: each call ends with a printable status, a stranger's for who it is", async () => {
    const stranger = generateKeyPair();
    const callers = {
      "a self-signed stranger": { ca: ca.certificate, certificate: selfSignedCertificate(stranger), privateKey: stranger.privateKey },
      "a node": nodeTls(owner),
      "a join certificate": joinTls(owner),
    };
    for (const [who, tls] of Object.entries(callers)) {
      const client = dialShareHolder(holder.id, "127.0.0.1", tls, port);
      try {
        for (const text of hostileRounds(15)) {
          const outcomes = await callEveryMethod(ShareHolder, client, text);
          expect(answerProblems(outcomes, who, who === "a self-signed stranger" ? Status.UNAUTHENTICATED : undefined)).toEqual([]);
        }
      } finally {
        client.close();
      }
    }
  }, 60_000);
});

describe("the cold-start rule as ctl cluster info says it", () => {
  test("a configured threshold above the other consensus members is named, with what is used instead", () => {
    expect(describeColdStart(1, 3)).toBe("disk alone unlocks (one consensus member; a second one turns threshold shares on)");
    expect(describeColdStart(3, 0)).toBe("each consensus member needs shares from any 2 of the other 2 (a majority); no disk alone opens its data");
    expect(describeColdStart(3, 5)).toBe(
      "each consensus member needs shares from any 2 of the other 2 (configured threshold 5, more than the 2 others there are: all of them until more join); no disk alone opens its data",
    );
    expect(describeColdStart(5, 2)).toBe("each consensus member needs shares from any 2 of the other 4 (configured threshold 2); no disk alone opens its data");
  });
});
