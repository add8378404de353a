import { describe, expect, test } from "bun:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { ContainerRegistrySchema, type ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import { toPem } from "../pki/mod.ts";
import { testCA, tempDir } from "../testing/mod.ts";
import { hostsToml, MAX_MIRRORS, mirrorUrlProblem, registryHostProblem, registryProblem, writeRegistryHosts } from "./mod.ts";

const registry = (fields: MessageInitShape<typeof ContainerRegistrySchema>): ContainerRegistry => create(ContainerRegistrySchema, { host: "registry.example.com", ...fields });
const caPem = toPem(testCA().certificate);

describe("hosts.toml", () => {
  test("mirrors in order for pull and resolve, the host itself last (containerd's default server)", () => {
    expect(hostsToml(registry({ mirrors: ["https://m1.example.com", "http://10.0.0.9:5000/cache"] }))).toBe(
      [
        "# registry.example.com: written by nodecore from the cluster's registry configuration",
        "# (ctl cluster registry); every change there replaces this file.",
        "",
        '[host."https://m1.example.com"]',
        '  capabilities = ["pull", "resolve"]',
        "",
        '[host."http://10.0.0.9:5000/cache"]',
        '  capabilities = ["pull", "resolve"]',
        "",
      ].join("\n"),
    );
  });

  test("the upstream off: the last mirror takes the server's place, so the host itself is never asked", () => {
    const text = hostsToml(registry({ mirrors: ["https://m1.example.com", "https://m2.example.com"], upstreamDisabled: true }));
    expect(text).toContain('server = "https://m2.example.com"\ncapabilities = ["pull", "resolve"]\n');
    expect(text).toContain('[host."https://m1.example.com"]');
    expect(text).not.toContain('[host."https://m2.example.com"]');
    expect(text).not.toContain('registry.example.com"');
  });

  test("the CA and skip_verify apply to the host and to every mirror", () => {
    const text = hostsToml(registry({ mirrors: ["https://m1.example.com"], skipVerify: true }), "/run/registries/registry.example.com/ca.pem");
    const lines = text.split("\n");
    expect(lines.filter((l) => l.trim() === 'ca = "/run/registries/registry.example.com/ca.pem"')).toHaveLength(2);
    expect(lines.filter((l) => l.trim() === "skip_verify = true")).toHaveLength(2);
  });

  test("no credentials are ever written into hosts.toml", () => {
    const text = hostsToml(registry({ credentials: { username: "alice", password: "s3cret-pw" } }));
    expect(text).not.toContain("s3cret-pw");
    expect(text).not.toContain("alice");
  });
});

describe("validation: each field, one line naming it", () => {
  test("hosts", () => {
    for (const host of ["registry.example.com", "docker.io", "10.0.0.5:5000", "localhost:5000", "ghcr.io"]) expect(registryHostProblem(host)).toBeUndefined();
    expect(registryHostProblem("")).toBe("is empty");
    expect(registryHostProblem("https://registry.example.com")).toContain("a host, not a URL");
    expect(registryHostProblem("Registry.Example.com")).toContain("lower case");
    expect(registryHostProblem("registry.example.com:99999")).toContain("port 99999 is not 1 to 65535");
    expect(registryHostProblem("registry.example.com:0")).toContain("is not 1 to 65535");
    expect(registryHostProblem("300.1.1.1")).toContain("not an IPv4 address");
    expect(registryHostProblem("a/b")).toContain("is not a registry host");
    expect(registryHostProblem("..")).toContain("is not a registry host");
    expect(registryHostProblem("evil\u202ehost")).toContain("\\u{202e}");
    expect(registryHostProblem("a".repeat(300))).toContain("more than");
    expect(registryHostProblem("a.b.c.d.e.f")).toBeUndefined();
    expect(registryHostProblem("a.b.c.d.e.f.g:5000")).toBe("'a.b.c.d.e.f.g:5000': 7 name parts, more than the 6 the kubelet matches logins for");
  });

  test("mirror URLs", () => {
    expect(mirrorUrlProblem("https://mirror.example.com")).toBeUndefined();
    expect(mirrorUrlProblem("http://10.0.0.9:5000/v2-cache")).toBeUndefined();
    expect(mirrorUrlProblem("mirror.example.com")).toContain("is not a URL");
    expect(mirrorUrlProblem("ftp://mirror.example.com")).toContain("use https or http");
    expect(mirrorUrlProblem("https://bob:pw@mirror.example.com")).toContain("no user or password in a URL");
    expect(mirrorUrlProblem("https://bob:pw@mirror.example.com")).not.toContain("pw");
    expect(mirrorUrlProblem("https://mirror.example.com/?x=1")).toContain("has a query");
    expect(mirrorUrlProblem("https://mirror.example.com/#x")).toContain("has a fragment");
    expect(mirrorUrlProblem("https://mirror.example.com/a b")).toContain("a space");
    expect(mirrorUrlProblem(`https://${"a".repeat(600)}.com`)).toContain("more than 512");
  });

  test("entries", () => {
    expect(registryProblem(registry({ mirrors: ["https://m.example.com"], caPem, credentials: { username: "u", password: "p" } }))).toBeUndefined();
    expect(registryProblem(registry({ host: "bad host" }))).toStartWith("host: ");
    expect(registryProblem(registry({ mirrors: ["nope"] }))).toStartWith("mirrors[0]: ");
    expect(registryProblem(registry({ mirrors: ["https://m.example.com", "https://m.example.com/"] }))).toContain("listed twice");
    expect(registryProblem(registry({ mirrors: Array.from({ length: MAX_MIRRORS + 1 }, (_, i) => `https://m${i}.example.com`) }))).toContain(`more than ${MAX_MIRRORS}`);
    expect(registryProblem(registry({ upstreamDisabled: true }))).toContain("name at least one mirror");
    expect(registryProblem(registry({ caPem: "not a certificate" }))).toBe("ca_pem: holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    expect(registryProblem(registry({ caPem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }))).toBe("ca_pem: certificate 1 of 1 does not parse");
    expect(registryProblem(registry({ caPem: `${caPem}-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n` }))).toContain("besides PEM certificates");
    expect(registryProblem(registry({ credentials: { username: "u", password: "" } }))).toBe("credentials.password: is empty");
    expect(registryProblem(registry({ credentials: { username: "a:b", password: "p" } }))).toContain("credentials.username");
    const bad = registryProblem(registry({ credentials: { username: "u", password: "se\u0000cret" } }));
    expect(bad).toBe("credentials.password: holds an unprintable character");
  });
});

describe("the hosts directory", () => {
  test("one directory per host with its hosts.toml and CA (0600), hosts no longer set removed, a CA taken away removed", () => {
    using dir = tempDir();
    const hostsDir = join(dir.path, "registries");
    writeRegistryHosts(hostsDir, [registry({ caPem }), registry({ host: "10.0.0.5:5000", mirrors: ["https://m.example.com"] })]);
    expect(readdirSync(hostsDir).sort()).toEqual(["10.0.0.5:5000", "registry.example.com"]);
    expect(readFileSync(join(hostsDir, "registry.example.com", "ca.pem"), "utf8")).toBe(caPem);
    expect(readFileSync(join(hostsDir, "registry.example.com", "hosts.toml"), "utf8")).toContain(`ca = "${hostsDir}/registry.example.com/ca.pem"`);
    expect(statSync(join(hostsDir, "registry.example.com", "hosts.toml")).mode & 0o777).toBe(0o600);

    writeRegistryHosts(hostsDir, [registry({})]);
    expect(readdirSync(hostsDir)).toEqual(["registry.example.com"]);
    expect(existsSync(join(hostsDir, "registry.example.com", "ca.pem"))).toBe(false);
    expect(readFileSync(join(hostsDir, "registry.example.com", "hosts.toml"), "utf8")).not.toContain("ca =");
    expect(readdirSync(join(hostsDir, "registry.example.com"))).toEqual(["hosts.toml"]);

    writeRegistryHosts(hostsDir, []);
    expect(readdirSync(hostsDir)).toEqual([]);
  });
});
