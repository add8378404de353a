import { describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { NodeParametersSchema, SealedConfigurationSchema, type NodeParameters } from "../../proto/gen/api/configuration_pb.ts";
import { createHash, type KeyObject } from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import { BackupWriter, readBackupHeader, SIGNED_MAGIC } from "../backup/mod.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { tempDir, testCA } from "../testing/mod.ts";
import { decideEnrolment, readNodeParameters, ParametersError } from "./mod.ts";

const ownerKey = new Uint8Array(32).fill(7);
const clusterCA = testCA();
const ca = clusterCA.certificate;

/** Restore parameters of a signed backup: its header and snapshot, signed by `signer` (the cluster CA's key unless forged). */
function restore(options: { signer?: KeyObject; caCertificate?: Uint8Array; snapshot?: Buffer } = {}): NodeParameters {
  const database = Buffer.alloc(4096 * 2);
  database.writeUInt16LE(0x04, 8);
  database.writeUInt32LE(0xed0cdaed, 16);
  database.writeUInt32LE(2, 20);
  database.writeUInt32LE(4096, 24);
  const snapshot = Buffer.concat([database, createHash("sha256").update(database).digest()]);
  const writer = new BackupWriter(
    ed25519.getPublicKey(ed25519.utils.randomSecretKey()),
    { caFingerprint: ca.fingerprint256, etcdRevision: 5, createdAt: "2026-11-27T10:00:00.000Z", nodeCount: 1, nodecoreVersion: "test" },
    options.signer ?? clusterCA.privateKey,
  );
  const file = Buffer.concat([writer.push(snapshot), writer.finish()]);
  const signature = file.subarray(file.length - SIGNED_MAGIC.length - 64, file.length - SIGNED_MAGIC.length);
  return create(NodeParametersSchema, {
    cluster: {
      case: "clusterRestore",
      value: {
        ownerPublicKey: ownerKey,
        snapshot: options.snapshot ?? snapshot,
        caCertificate: options.caCertificate ?? new Uint8Array(ca.raw),
        backupHeader: readBackupHeader(file).headerBytes,
        signature,
      },
    },
  });
}

const bootstrap = () => create(NodeParametersSchema, { cluster: { case: "clusterBootstrap", value: { ownerPublicKey: ownerKey } } });
const register = (overrides: Partial<{ ticket: Uint8Array; ca: Uint8Array; hosts: string[] }> = {}) =>
  create(NodeParametersSchema, {
    cluster: {
      case: "clusterRegister",
      value: {
        registerTicket: overrides.ticket ?? new Uint8Array([1, 2, 3]),
        caCertificate: overrides.ca ?? new Uint8Array(ca.raw),
        clusterDirectory: { nodes: (overrides.hosts ?? ["10.0.0.2"]).map((host) => ({ publicKey: new Uint8Array(32), addresses: [{ host }] })) },
      },
    },
  });

function setup(files: { fwCfg?: NodeParameters | Uint8Array; esp?: NodeParameters | Uint8Array; sealed?: Uint8Array }) {
  const dir = tempDir();
  const paths = { fwCfg: join(dir.path, "fw_cfg", "raw"), esp: join(dir.path, "esp", "parameters.pb"), sealed: join(dir.path, "esp", "sealed.pb") };
  const write = (path: string, content: NodeParameters | Uint8Array) => {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, content instanceof Uint8Array ? content : toBinary(NodeParametersSchema, content));
  };
  if (files.fwCfg) write(paths.fwCfg, files.fwCfg);
  if (files.esp) write(paths.esp, files.esp);
  if (files.sealed) write(paths.sealed, files.sealed);
  return { dir, paths };
}

describe("node parameters", () => {
  test("are read from fw_cfg", () => {
    const { dir, paths } = setup({ fwCfg: bootstrap() });
    using _ = dir;
    const params = readNodeParameters(paths, captureLogger("t").logger);
    expect(params.kind).toBe("bootstrap");
    expect(params.source).toBe("fw_cfg");
  });

  test("are read from the ESP when fw_cfg has none", () => {
    const { dir, paths } = setup({ esp: register() });
    using _ = dir;
    const params = readNodeParameters(paths, captureLogger("t").logger);
    expect(params.kind).toBe("register");
    expect(params.source).toBe("esp");
  });

  test("fw_cfg wins over the ESP, with a warning", () => {
    const { dir, paths } = setup({ fwCfg: bootstrap(), esp: register() });
    using _ = dir;
    const { logger, entries } = captureLogger("t");
    const params = readNodeParameters(paths, logger);
    expect(params.kind).toBe("bootstrap");
    expect(params.source).toBe("fw_cfg");
    expect(entries.some((e) => e.level === "warn" && e.message.includes("using fw_cfg"))).toBe(true);
  });

  test("missing everywhere is an error naming both places", () => {
    const { dir, paths } = setup({});
    using _ = dir;
    expect(() => readNodeParameters(paths, captureLogger("t").logger)).toThrow(`no node parameters: looked in qemu fw_cfg (${paths.fwCfg}) and on the ESP (${paths.esp})`);
  });

  const invalid: [string, NodeParameters | Uint8Array, string][] = [
    ["corrupt bytes", new Uint8Array([0x0a, 0xff, 0xff]), "are corrupt"],
    ["empty file", new Uint8Array(0), "are empty"],
    // Field 15 is unknown to NodeParameters: it parses, but asks for nothing.
    ["neither bootstrap nor register", new Uint8Array([0x78, 0x01]), "set neither cluster bootstrap, cluster register nor cluster restore"],
    [
      "a short owner key",
      create(NodeParametersSchema, { cluster: { case: "clusterBootstrap", value: { ownerPublicKey: new Uint8Array(5) } } }),
      "bootstrap owner public key must be 32 bytes (ed25519), got 5",
    ],
    ["an empty ticket", register({ ticket: new Uint8Array(0) }), "register ticket is empty"],
    ["a CA that does not parse", register({ ca: new Uint8Array([1, 2, 3]) }), "CA certificate does not parse"],
    ["an empty directory", register({ hosts: [] }), "cluster directory lists no nodes"],
    ["a directory without addresses", register({ hosts: [""] }), "cluster directory has no node addresses"],
    [
      "a time server that is no host",
      create(NodeParametersSchema, { ...bootstrap(), timeServers: ["ntp.example.org", "10.0.0.1\nallow all"] }),
      'time server "10.0.0.1\\nallow all" is neither an IP address nor a host name',
    ],
    ["a restore without a CA (an older ctl)", restore({ caCertificate: new Uint8Array(0) }), "the restore names no cluster CA (written by an older ctl)"],
    ["a restore signed by another key", restore({ signer: generateKeyPair().privateKey }), "the restore's backup its signature is not by the pinned cluster CA's key"],
    ["a restore pinned to another CA", restore({ caCertificate: new Uint8Array(testCA().certificate.raw) }), "the restore's backup it is of another cluster"],
    ["nine time servers", create(NodeParametersSchema, { ...bootstrap(), timeServers: Array.from({ length: 9 }, (_, i) => `10.0.0.${i + 1}`) }), "9 time servers, more than 8"],
  ];
  test("a restore signed by the CA it names is valid", () => {
    const { dir, paths } = setup({ fwCfg: restore() });
    using _ = dir;
    const read = readNodeParameters(paths, captureLogger("t").logger);
    expect(read.kind).toBe("restore");
    expect(read.kind === "restore" && read.caCertificate.fingerprint256).toBe(ca.fingerprint256);
  });

  for (const [what, content, message] of invalid) {
    test(`${what} is an error naming the source`, () => {
      const { dir, paths } = setup({ fwCfg: content });
      using _ = dir;
      let caught: unknown;
      try {
        readNodeParameters(paths, captureLogger("t").logger);
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(ParametersError);
      expect((caught as Error).message).toContain(message);
      expect((caught as Error).message).toContain(`fw_cfg (${paths.fwCfg})`);
    });
  }
});

describe("enrolment decision", () => {
  const sealed = toBinary(SealedConfigurationSchema, create(SealedConfigurationSchema, { nodeUnlockKey: new Uint8Array(32), joinKey: new Uint8Array(32), clusterCa: new Uint8Array(ca.raw) }));

  test("a sealed configuration means join, whatever the parameters say", () => {
    const { dir, paths } = setup({ fwCfg: bootstrap(), sealed });
    using _ = dir;
    expect(decideEnrolment(paths, captureLogger("t").logger).kind).toBe("join");
  });

  test("without one, the parameters decide between bootstrap and register", () => {
    const a = setup({ fwCfg: bootstrap() });
    const b = setup({ esp: register() });
    using _a = a.dir;
    using _b = b.dir;
    expect(decideEnrolment(a.paths, captureLogger("t").logger).kind).toBe("bootstrap");
    expect(decideEnrolment(b.paths, captureLogger("t").logger).kind).toBe("register");
  });

  test("a corrupt sealed configuration is an error, never a fresh start", () => {
    const { dir, paths } = setup({ fwCfg: bootstrap(), sealed: new Uint8Array([9, 9, 9]) });
    using _ = dir;
    expect(() => decideEnrolment(paths, captureLogger("t").logger)).toThrow("refusing to start over");
  });
});
