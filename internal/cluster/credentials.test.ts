import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { storageLayout } from "../localstorage/mod.ts";
import { tempDir, testCA, testNode } from "../testing/mod.ts";
import { CredentialsError, loadCredentials, saveCredentials } from "./credentials.ts";

function failure(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error("expected an error");
}

describe("saved node credentials", () => {
  test("load back as saved, and an empty or corrupt file is an error that names the file", () => {
    using dir = tempDir("nodecore-credentials-");
    const layout = storageLayout(join(dir.path, "root"));
    const { credentials } = testNode(testCA());
    const { certificate } = credentials;
    saveCredentials(layout, credentials);
    expect(loadCredentials(layout)!.certificate.raw.equals(certificate.raw)).toBe(true);

    writeFileSync(layout.data.node.certificate, "");
    const empty = failure(() => loadCredentials(layout));
    expect(empty).toBeInstanceOf(CredentialsError);
    expect(empty.message).toStartWith(`node certificate ${layout.data.node.certificate} is empty`);

    writeFileSync(layout.data.node.caCertificate, "garbage");
    writeFileSync(layout.data.node.certificate, certificate.raw);
    expect(failure(() => loadCredentials(layout)).message).toStartWith(`cluster CA certificate ${layout.data.node.caCertificate} is corrupt: `);
  });
});
