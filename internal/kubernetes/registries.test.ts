import { describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { lstatSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { ContainerRegistrySchema } from "../../proto/gen/common/common_pb.ts";
import { tempDir } from "../testing/mod.ts";
import { CREDENTIAL_PROVIDER_NAME, credentialProviderConfig, credentialResponse, credentialsFile, imageHost, providerPorts, registryPorts, writeCredentialProvider } from "./mod.ts";

const request = (image: string) => JSON.stringify({ apiVersion: "credentialprovider.kubelet.k8s.io/v1", kind: "CredentialProviderRequest", image });
const file = credentialsFile([
  create(ContainerRegistrySchema, { host: "registry.example.com:5000", credentials: { username: "alice", password: "pw-1" } }),
  create(ContainerRegistrySchema, { host: "docker.io", credentials: { username: "bob", password: "tok-2" } }),
  create(ContainerRegistrySchema, { host: "anonymous.example.com" }),
]);

describe("the kubelet's credential provider", () => {
  test("an image's registry host, as containerd resolves it", () => {
    expect(imageHost("nginx")).toBe("docker.io");
    expect(imageHost("library/nginx:1.27")).toBe("docker.io");
    expect(imageHost("docker.io/library/nginx")).toBe("docker.io");
    expect(imageHost("registry.example.com:5000/team/app@sha256:00")).toBe("registry.example.com:5000");
    expect(imageHost("localhost/app")).toBe("localhost");
    expect(imageHost("10.0.0.5:5000/app")).toBe("10.0.0.5:5000");
  });

  test("answers with the login of the image's host only, never cached", () => {
    const answer = JSON.parse(credentialResponse(request("registry.example.com:5000/team/app:1"), file));
    expect(answer).toEqual({
      apiVersion: "credentialprovider.kubelet.k8s.io/v1",
      kind: "CredentialProviderResponse",
      cacheKeyType: "Registry",
      cacheDuration: "0s",
      auth: { "registry.example.com:5000": { username: "alice", password: "pw-1" } },
    });
    expect(JSON.parse(credentialResponse(request("nginx:latest"), file)).auth).toEqual({ "docker.io": { username: "bob", password: "tok-2" } });
  });

  test("no login for a host without one, an unknown host, or no file at all", () => {
    expect(JSON.parse(credentialResponse(request("anonymous.example.com/app"), file)).auth).toEqual({});
    expect(JSON.parse(credentialResponse(request("other.example.com/app"), file)).auth).toEqual({});
    expect(JSON.parse(credentialResponse(request("constructor.example.com/app"), file)).auth).toEqual({});
    expect(JSON.parse(credentialResponse(request("registry.example.com:5000/app"), undefined)).auth).toEqual({});
  });

  test("a request that is not the kubelet's is refused with a line saying so", () => {
    expect(() => credentialResponse("{", file)).toThrow("not JSON");
    expect(() => credentialResponse(JSON.stringify({ kind: "Other", image: "x" }), file)).toThrow("not a CredentialProviderRequest");
    expect(() => credentialResponse(request(""), file)).toThrow("not a CredentialProviderRequest");
  });

  test("the ports the patterns cover: the common ones and those of the configured hosts", () => {
    const registries = [
      create(ContainerRegistrySchema, { host: "registry.example.com:6000" }),
      create(ContainerRegistrySchema, { host: "docker.io" }),
      create(ContainerRegistrySchema, { host: "10.0.0.5:5000" }),
    ];
    expect(registryPorts(registries)).toEqual([5000, 6000]);
    expect(providerPorts(registries)).toEqual([443, 5000, 5001, 6000, 8080, 8443]);
    const patterns = credentialProviderConfig("/f", providerPorts(registries)).providers as { matchImages: string[] }[];
    expect(patterns[0]!.matchImages).toContain("*.*.*:6000");
    expect(patterns[0]!.matchImages).toHaveLength(6 * 7);
  });

  test("its configuration and bin directory: the node's own binary under the provider's name, asked at every pull", () => {
    using dir = tempDir();
    writeCredentialProvider(dir.path, "/init");
    writeCredentialProvider(dir.path, "/init"); // again, as at every kubelet start
    const link = join(dir.path, "credential-providers", CREDENTIAL_PROVIDER_NAME);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe("/init");
    const config = JSON.parse(readFileSync(join(dir.path, "credential-providers.json"), "utf8"));
    expect(config.providers[0]).toMatchObject({
      name: CREDENTIAL_PROVIDER_NAME,
      defaultCacheDuration: "0s",
      apiVersion: "credentialprovider.kubelet.k8s.io/v1",
      args: ["registry-credentials", join(dir.path, "registry-credentials.json")],
    });
    expect(config.providers[0].matchImages).toContain("*.*.*.*");
    // The kubelet matches ports exactly: the common registry ports are covered too.
    expect(config.providers[0].matchImages).toContain("*.*.*.*:5000");
  });
});
