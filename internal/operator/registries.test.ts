import { describe, expect, test } from "bun:test";
import { toPem } from "../pki/mod.ts";
import { testCA } from "../testing/mod.ts";
import { PASSWORD_ON_COMMAND_LINE, registryEntry, registryTable, type RegistryFlags } from "./mod.ts";
import { create } from "@bufbuild/protobuf";
import { ContainerRegistryShownSchema } from "../../proto/gen/api/management_pb.ts";

const flags = (more: Partial<RegistryFlags> = {}): RegistryFlags => ({ mirrors: [], skipVerify: false, noUpstream: false, passwordStdin: false, passwordTyped: false, ...more });
const noStdin = () => {
  throw new Error("stdin read");
};
const caPem = toPem(testCA().certificate);

describe("ctl cluster registry set", () => {
  test("an entry from the flags: mirrors in order, the CA file, the login from stdin", () => {
    const entry = registryEntry(
      "registry.example.com",
      flags({ mirrors: ["https://a.example.com", "http://10.0.0.9:5000"], ca: "/ca.pem", username: "alice", passwordStdin: true }),
      () => "s3cret\n",
      () => caPem,
    );
    expect(entry.mirrors).toEqual(["https://a.example.com", "http://10.0.0.9:5000"]);
    expect(entry.caPem).toBe(caPem);
    expect(entry.credentials).toMatchObject({ username: "alice", password: "s3cret" });
    expect(entry.peersDisabled).toBe(false);
    expect(
      registryEntry(
        "registry.example.com",
        flags({ noPeers: true }),
        () => "",
        () => caPem,
      ).peersDisabled,
    ).toBe(true);
  });

  test("bad input: one line naming its cause, before any call", () => {
    const refused = (host: string, more: Partial<RegistryFlags>, stdin: () => string = noStdin, file: (p: string) => string = () => caPem) => {
      try {
        registryEntry(host, flags(more), stdin, file);
      } catch (err) {
        expect((err as Error).message).not.toContain("\n");
        return (err as Error).message;
      }
      throw new Error("not refused");
    };
    expect(refused("https://registry.example.com", {})).toContain("<host>: 'https://registry.example.com' is not a registry host (a host, not a URL");
    expect(refused("registry.example.com", { mirrors: ["https://ok.example.com", "ftp://x"] })).toBe("--mirror 2: 'ftp://x': the scheme is 'ftp'; use https or http");
    expect(refused("registry.example.com", { ca: "/ca.pem" }, noStdin, () => "hello")).toBe("--ca: /ca.pem holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    expect(
      refused("registry.example.com", { ca: "/nope" }, noStdin, () => {
        throw Object.assign(new Error("x"), { code: "ENOENT" });
      }),
    ).toBe("--ca: cannot read /nope: ENOENT");
    expect(refused("registry.example.com", { passwordTyped: true })).toBe(PASSWORD_ON_COMMAND_LINE);
    expect(refused("registry.example.com", { username: "alice" })).toBe("--username needs --password-stdin: pipe the password (or token) in");
    expect(refused("registry.example.com", { username: "alice", passwordStdin: true }, () => "")).toBe("--password-stdin: stdin was empty");
    expect(refused("registry.example.com", { username: "alice", passwordStdin: true }, () => "a\nb\n")).toContain("more than one line");
    expect(refused("registry.example.com", { noUpstream: true })).toBe("--mirrors-only: with the host itself off, name at least one mirror");
  });
});

test("the listing shows skip-verify, peers turned off and the login's user, never a password", () => {
  const table = registryTable([
    create(ContainerRegistryShownSchema, { host: "registry.example.com", mirrors: ["https://m.example.com"], username: "alice", hasCredentials: true, ca: "CN=ca sha256:00" }),
    create(ContainerRegistryShownSchema, { host: "insecure.example.com", skipVerify: true, upstreamDisabled: false, peersDisabled: true }),
  ]);
  const lines = table.split("\n");
  expect(lines[0]).toBe("HOST                  MIRRORS                UPSTREAM  PEERS  CA             VERIFY              LOGIN");
  expect(lines[1]).toMatch(/^registry\.example\.com .* last +first /);
  expect(lines[2]).toMatch(/^insecure\.example\.com .* last +off /);
  expect(table).toContain("SKIPPED (insecure)");
  expect(table).toContain("alice");
  expect(registryTable([])).toContain("no registry configured");
});
