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
  issueCuratorCertificate,
  ipAddressesOf,
  isCanonicalEd25519PublicKey,
  CURATOR_ORGANIZATION,
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
    expect(
      Buffer.from(der.time(new Date("2030-01-02T03:04:05Z")))
        .subarray(2)
        .toString(),
    ).toBe("300102030405Z");
    expect(
      Buffer.from(der.time(new Date("2051-01-02T03:04:05Z")))
        .subarray(2)
        .toString(),
    ).toBe("20510102030405Z");
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
    const cert = issueNodeCertificate(ca, key.publicKey, { ipAddresses: ["10.0.0.1", "fd00::1"] });
    const nodeId = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
    expect(nodeId).toMatch(/^node-[0-9a-f]{16}$/);
    expect(commonNameOf(cert)).toBe(nodeId);
    expect(organizationOf(cert)).toBe("nodecore node");
    expect(cert.ca).toBe(false);
    // No name shared between nodes: a node certificate names one node only.
    expect(cert.subjectAltName).toBe(`DNS:${nodeId}, IP Address:10.0.0.1, IP Address:FD00:0:0:0:0:0:0:1`);
    expect(ipAddressesOf(cert)).toEqual(["10.0.0.1", "fd00::1"]);
    expect(verifyIssuedBy(cert, ca.certificate)).toBeUndefined();
  });

  test("verifyIssuedBy names what is wrong", () => {
    const otherKey = generateKeyPair();
    const other = { certificate: createClusterCA(otherKey), privateKey: otherKey.privateKey };
    const ownerKey = generateKeyPair();
    expect(verifyIssuedBy(issueOwnerCertificate(other, ownerKey.publicKey), ca.certificate)).toBe("certificate is not signed by the cluster CA");
    const expired = createCertificate({ commonName: "old", publicKey: ownerKey.publicKey, kind: "client", notBefore: new Date("2020-01-01"), validForMs: 1000 }, ca);
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
    const cert = issueNodeCertificate(ca, key.publicKey);
    const { tempDir } = await import("../testing/mod.ts");
    using dir = tempDir();
    await Bun.write(`${dir.path}/ca.pem`, ca.certificate.toString());
    await Bun.write(`${dir.path}/node.pem`, cert.toString());
    const result = Bun.spawnSync(["openssl", "verify", "-CAfile", `${dir.path}/ca.pem`, `${dir.path}/node.pem`]);
    expect(result.stdout.toString()).toContain("node.pem: OK");
  });

  test("a curator certificate names the node and its address, serves only, and expires when asked", () => {
    const key = generateKeyPair();
    const cert = issueCuratorCertificate(ca, key.publicKey, { address: "10.0.0.7", validForMs: 60 * 60 * 1000 });
    const nodeId = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
    expect(organizationOf(cert)).toBe(CURATOR_ORGANIZATION);
    expect(commonNameOf(cert)).toBe(nodeId);
    expect(ipAddressesOf(cert)).toEqual(["10.0.0.7"]);
    expect(cert.keyUsage).toEqual(["1.3.6.1.5.5.7.3.1"]);
    const lifetime = new Date(cert.validTo).getTime() - new Date(cert.validFrom).getTime();
    expect(lifetime).toBe(60 * 60 * 1000);
    expect(verifyIssuedBy(cert, ca.certificate)).toBeUndefined();
  });

  test("certificates are valid from a few minutes before they were issued, against clock skew", () => {
    const key = generateKeyPair();
    const cert = issueOwnerCertificate(ca, key.publicKey);
    expect(new Date(cert.validFrom).getTime()).toBeLessThan(Date.now() - 4 * 60 * 1000);
    // A verifier whose clock is two minutes behind still accepts it.
    expect(verifyIssuedBy(cert, ca.certificate, new Date(Date.now() - 2 * 60 * 1000))).toBeUndefined();
  });

  test("CAs carry path length 0, so nothing they issue can act as a CA under them", async () => {
    const { tempDir } = await import("../testing/mod.ts");
    using dir = tempDir();
    await Bun.write(`${dir.path}/ca.pem`, ca.certificate.toString());
    const text = Bun.spawnSync(["openssl", "x509", "-noout", "-text", "-in", `${dir.path}/ca.pem`]).stdout.toString();
    expect(text).toMatch(/CA:TRUE, pathlen:0/);
    // A certificate that claims to be a CA, signed by the cluster CA, does not verify as a chain.
    const rogueKey = generateKeyPair();
    const rogue = createCertificate({ commonName: "rogue", publicKey: rogueKey.publicKey, kind: "ca" }, ca);
    const leafKey = generateKeyPair();
    const leaf = issueOwnerCertificate({ certificate: rogue, privateKey: rogueKey.privateKey }, leafKey.publicKey);
    await Bun.write(`${dir.path}/rogue.pem`, rogue.toString());
    await Bun.write(`${dir.path}/leaf.pem`, leaf.toString());
    const result = Bun.spawnSync(["openssl", "verify", "-CAfile", `${dir.path}/ca.pem`, "-untrusted", `${dir.path}/rogue.pem`, `${dir.path}/leaf.pem`]);
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr.toString() + result.stdout.toString()).toContain("path length constraint exceeded");
  });
});

describe("canonical Ed25519 public keys", () => {
  test("keys made by real private keys are canonical", () => {
    for (let i = 0; i < 20; i++) expect(isCanonicalEd25519PublicKey(rawPublicKey(generateKeyPair().publicKey))).toBe(true);
  });

  test("non-canonical encodings, points off the curve and small-order points are refused", () => {
    const hexKey = (h: string) => Uint8Array.from(Buffer.from(h, "hex"));
    // y = 2^255 - 1 ≥ p (the 32 × 0xff key), and y = p exactly.
    expect(isCanonicalEd25519PublicKey(new Uint8Array(32).fill(0xff))).toBe(false);
    expect(isCanonicalEd25519PublicKey(hexKey("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"))).toBe(false);
    // The identity (0, 1) and the point of order 2 (0, -1): small order.
    expect(isCanonicalEd25519PublicKey(hexKey("0100000000000000000000000000000000000000000000000000000000000000"))).toBe(false);
    expect(isCanonicalEd25519PublicKey(hexKey("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"))).toBe(false);
    // All zeros: y = 0 gives a point of order 4.
    expect(isCanonicalEd25519PublicKey(new Uint8Array(32))).toBe(false);
    // y = 2 is not on the curve.
    expect(isCanonicalEd25519PublicKey(hexKey("0200000000000000000000000000000000000000000000000000000000000000"))).toBe(false);
    // "-0": the identity with the sign bit set.
    expect(isCanonicalEd25519PublicKey(hexKey("0100000000000000000000000000000000000000000000000000000000000080"))).toBe(false);
    expect(isCanonicalEd25519PublicKey(new Uint8Array(31))).toBe(false);
  });
});
