// What the stand-in checks about the files it is given: that each
// certificate chains to the CA it must chain to, is for the use it is put
// to, carries the names it must carry, and matches its key. A failed check
// is a StubError naming the flag and the file.

import { X509Certificate, createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";

export class StubError extends Error {
  override name = "StubError";
}

export function readFlagFile(flag: string, path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new StubError(`--${flag}=${path}: cannot read it (${(error as Error).message})`);
  }
}

/** Every certificate in a PEM file (a CA bundle may hold several). */
export function certificatesOf(flag: string, path: string, text = readFlagFile(flag, path)): X509Certificate[] {
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new StubError(`--${flag}=${path}: no certificate in it`);
  try {
    return blocks.map((b) => new X509Certificate(b));
  } catch (error) {
    throw new StubError(`--${flag}=${path}: not a certificate (${(error as Error).message})`);
  }
}

export function privateKeyOf(flag: string, path: string, text = readFlagFile(flag, path)): KeyObject {
  try {
    return createPrivateKey(text);
  } catch (error) {
    throw new StubError(`--${flag}=${path}: not a private key (${(error as Error).message})`);
  }
}

const spki = (key: KeyObject) => key.export({ format: "der", type: "spki" }).toString("base64");

export function checkKeyMatches(flag: string, certificate: X509Certificate, key: KeyObject): void {
  if (spki(createPublicKey(key)) !== spki(certificate.publicKey)) throw new StubError(`--${flag}: the key does not belong to the certificate`);
}

/** Checks that the certificate is issued by one of the CAs, valid now, and not a CA itself. */
export function checkChain(what: string, certificate: X509Certificate, cas: readonly X509Certificate[]): X509Certificate {
  const issuer = cas.find((ca) => certificate.checkIssued(ca) && certificate.verify(ca.publicKey));
  if (!issuer) throw new StubError(`${what}: ${certificate.subject.replace(/\n/g, ", ")} is not signed by ${cas.map((c) => c.subject.replace(/\n/g, ", ")).join(" or ")}`);
  if (!issuer.ca) throw new StubError(`${what}: its issuer is not a CA`);
  if (certificate.ca) throw new StubError(`${what}: is a CA certificate, not an end-entity one`);
  const now = Date.now();
  if (now < Date.parse(certificate.validFrom) || now > Date.parse(certificate.validTo)) throw new StubError(`${what}: not valid now`);
  return issuer;
}

export type Usage = "serverAuth" | "clientAuth";
const USAGE_OIDS: Record<Usage, string> = { serverAuth: "1.3.6.1.5.5.7.3.1", clientAuth: "1.3.6.1.5.5.7.3.2" };

export function checkUsage(what: string, certificate: X509Certificate, usage: Usage): void {
  const usages = certificate.keyUsage ?? [];
  if (!usages.includes(USAGE_OIDS[usage])) throw new StubError(`${what}: not for ${usage} (extended key usages: ${usages.join(", ") || "none"})`);
}

export function subjectField(certificate: X509Certificate, field: "CN" | "O"): string[] {
  return certificate.subject
    .split("\n")
    .filter((line) => line.startsWith(`${field}=`))
    .map((line) => line.slice(field.length + 1));
}

export function checkNames(what: string, certificate: X509Certificate, names: { dns?: readonly string[]; ips?: readonly string[] }): void {
  for (const name of names.dns ?? []) if (certificate.checkHost(name) === undefined) throw new StubError(`${what}: does not name ${name}`);
  for (const ip of names.ips ?? []) if (certificate.checkIP(ip) === undefined) throw new StubError(`${what}: does not name ${ip}`);
}

/** A certificate file and its key file, checked against each other, the CAs, and a use. */
export function checkPair(
  flags: Record<string, string>,
  certFlag: string,
  keyFlag: string,
  cas: readonly X509Certificate[],
  usage: Usage,
): { certificate: X509Certificate; key: KeyObject; cert: string; keyText: string } {
  const cert = readFlagFile(certFlag, flags[certFlag]!);
  const keyText = readFlagFile(keyFlag, flags[keyFlag]!);
  const [certificate] = certificatesOf(certFlag, flags[certFlag]!, cert);
  const key = privateKeyOf(keyFlag, flags[keyFlag]!, keyText);
  checkKeyMatches(keyFlag, certificate!, key);
  checkChain(`--${certFlag}`, certificate!, cas);
  checkUsage(`--${certFlag}`, certificate!, usage);
  return { certificate: certificate!, key, cert, keyText };
}

/** The first host address of an IPv4 CIDR ("10.96.0.0/12" → "10.96.0.1"). */
export function firstHost(flag: string, cidr: string): string {
  const match = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/(\d+)$/.exec(cidr);
  if (!match) throw new StubError(`--${flag}=${cidr}: not an IPv4 CIDR`);
  const octets = match.slice(1, 5).map(Number);
  const bits = Number(match[5]);
  if (octets.some((o) => o > 255) || bits > 30) throw new StubError(`--${flag}=${cidr}: not a usable IPv4 CIDR`);
  const base = (((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0) & (bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0);
  const host = base + 1;
  return [host >>> 24, (host >>> 16) & 255, (host >>> 8) & 255, host & 255].join(".");
}
