import { describe, expect, test } from "bun:test";
import { describeRequest } from "./mod.ts";

describe("describeRequest", () => {
  test("secrets are shown as redacted by field name, at any depth, whatever they hold", () => {
    const detail = describeRequest({
      host: "registry.example.com",
      registry: { host: "r.example.com", credentials: { username: "alice", password: "hunter2" } },
      credentials: { username: "bob", password: "pw-top" },
      newPassword: "pw-2",
      accessToken: "tok-3",
      clientSecret: "sec-4",
    });
    for (const secret of ["hunter2", "pw-top", "pw-2", "tok-3", "sec-4", "alice", "bob"]) expect(detail).not.toContain(secret);
    expect(detail).toContain('host: "registry.example.com"');
    expect(detail).toContain("credentials: <redacted>");
    expect(detail).toContain("newPassword: <redacted>");
  });

  test("a URL keeps its origin and path, never its user, password or query", () => {
    const detail = describeRequest({ schedule: { putUrl: "https://user:pass@store.example/backups/?X-Amz-Signature=abc123" }, mirror: "https://m.example.com/cache" });
    expect(detail).not.toContain("pass");
    expect(detail).not.toContain("abc123");
    expect(detail).not.toContain("user");
    expect(detail).toContain('"https://store.example/backups/?<query redacted>"');
    expect(detail).toContain('mirror: "https://m.example.com/cache"');
  });
});
