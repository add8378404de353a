import { describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import * as der from "./der.ts";
import {
  createCertificate,
  createClusterCA,
  generateKeyPair,
  issueNodeCertificate,
  issueOwnerCertificate,
  nodeIdFromPublicKey,
  privateKeyFromRaw,
  publicKeyFromRaw,
  rawPrivateKey,
  rawPublicKey,
  selfSignedCertificate,
  verifyIssuedBy,
  commonNameOf,
  organizationOf,
} from "./mod.ts";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

describe("der", () => {
  test("encodes integers, lengths, OIDs and times as DER requires", () => {
    expect(hex(der.integer(0))).toBe("020100");
    expect(hex(der.integer(128))).toBe("02020080");
    expect(hex(der.integer(Uint8Array.of(0, 0, 5)))).toBe("020105");
    expect(hex(der.objectIdentifier("1.3.101.112"))).toBe("06032b6570");
    expect(hex(der.objectIdentifier("2.5.29.37"))).toBe("0603551d25");
    expect(hex(der.objectIdentifier("1.2.840.113549"))).toBe("06062a864886f70d");
    expect(hex(der.octetString(new Uint8Array(200))).slice(0, 6)).toBe("0481c8");
    expect(hex(der.octetString(new Uint8Array(300))).slice(0, 8)).toBe("0482012c");
    expect(Buffer.from(der.time(new Date("2030-01-02T03:04:05Z"))).subarray(2).toString()).toBe("300102030405Z");
    expect(Buffer.from(der.time(new Date("2051-01-02T03:04:05Z"))).subarray(2).toString()).toBe("20510102030405Z");
    // keyUsage digitalSignature+keyCertSign+cRLSign: one unused bit.
    expect(hex(der.namedBits([0, 5, 6]))).toBe("03020186");
    expect(hex(der.namedBits([0]))).toBe("03020780");
  });
});

describe("certificates", () => {
  const caKey = generateKeyPair();
  const ca = { certificate: createClusterCA(caKey), privateKey: caKey.privateKey };

  test("the cluster CA is a self-signed CA certificate", () => {
    expect(ca.certificate.ca).toBe(true);
    expect(ca.certificate.verify(ca.certificate.publicKey)).toBe(true);
    expect(ca.certificate.subject).toContain("CN=nodecore cluster CA");
  });

  test("a node certificate is named by the node ID and chains to the CA", () => {
    const key = generateKeyPair();
    const cert = issueNodeCertificate(ca, key.publicKey, { serverName: "cluster.test", ipAddresses: ["10.0.0.1", "fd00::1"] });
    const nodeId = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
    expect(nodeId).toMatch(/^node-[0-9a-f]{16}$/);
    expect(commonNameOf(cert)).toBe(nodeId);
    expect(organizationOf(cert)).toBe("nodecore node");
    expect(cert.ca).toBe(false);
    expect(cert.subjectAltName).toBe(`DNS:${nodeId}, DNS:cluster.test, DNS:localhost, IP Address:10.0.0.1, IP Address:FD00:0:0:0:0:0:0:1`);
    expect(verifyIssuedBy(cert, ca.certificate)).toBeUndefined();
  });

  test("verifyIssuedBy names what is wrong", () => {
    const otherKey = generateKeyPair();
    const other = { certificate: createClusterCA(otherKey), privateKey: otherKey.privateKey };
    const ownerKey = generateKeyPair();
    expect(verifyIssuedBy(issueOwnerCertificate(other, ownerKey.publicKey), ca.certificate)).toBe("certificate is not signed by the cluster CA");
    const expired = createCertificate(
      { commonName: "old", publicKey: ownerKey.publicKey, kind: "client", notBefore: new Date("2020-01-01"), validForMs: 1000 },
      ca,
    );
    expect(verifyIssuedBy(expired, ca.certificate)).toBe("certificate has expired");
    expect(verifyIssuedBy(selfSignedCertificate(ownerKey), ca.certificate)).toBe("certificate is not signed by the cluster CA");
  });

  test("certificates survive a PEM round trip and keys a raw round trip", () => {
    const key = generateKeyPair();
    const cert = issueOwnerCertificate(ca, key.publicKey);
    const again = new X509Certificate(cert.toString());
    expect(again.fingerprint256).toBe(cert.fingerprint256);
    expect(rawPublicKey(publicKeyFromRaw(rawPublicKey(key.publicKey)))).toEqual(rawPublicKey(key.publicKey));
    const restored = privateKeyFromRaw(rawPrivateKey(key.privateKey));
    expect(rawPrivateKey(restored)).toEqual(rawPrivateKey(key.privateKey));
    expect(() => publicKeyFromRaw(new Uint8Array(31))).toThrow("ed25519 public key must be 32 bytes, got 31");
  });

  test("openssl accepts the chain", async () => {
    const key = generateKeyPair();
    const cert = issueNodeCertificate(ca, key.publicKey, { serverName: "cluster.test" });
    const { tempDir } = await import("../testing/mod.ts");
    using dir = tempDir();
    await Bun.write(`${dir.path}/ca.pem`, ca.certificate.toString());
    await Bun.write(`${dir.path}/node.pem`, cert.toString());
    const result = Bun.spawnSync(["openssl", "verify", "-CAfile", `${dir.path}/ca.pem`, `${dir.path}/node.pem`]);
    expect(result.stdout.toString()).toContain("node.pem: OK");
  });
});
