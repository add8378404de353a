// out/ctl: the owner's command line for a cluster. Wiring only: commands
// are parsed here and carried out by internal/operator.

import { cac } from "cac";
import { create, toBinary } from "@bufbuild/protobuf";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { X509Certificate } from "node:crypto";
import { join } from "node:path";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import {
  ROLE_FIELDS,
  configPaths,
  defaultConfigDir,
  generateOwnerKey,
  loadCredentials,
  nodeTable,
  readOwnerKey,
  saveCredentials,
  summarize,
  takeOwnership,
  withFailover,
  DEFAULT_CALL_TIMEOUT_MS,
  type RoleName,
} from "../../internal/operator/mod.ts";
import { endpointsOfDirectory, formatEndpoint } from "../../internal/curator/client/mod.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey } from "../../internal/pki/mod.ts";
import { RpcError, Status } from "../../internal/rpc/mod.ts";
import { VERSION } from "../../internal/version/mod.ts";

interface GlobalOptions {
  config?: string;
  ownerKey?: string;
  timeout?: number;
  json?: boolean;
}

const progress = (line: string) => process.stderr.write(`ctl: ${line}\n`);

function paths(options: GlobalOptions) {
  return configPaths(options.config ?? defaultConfigDir());
}

function timeoutOf(options: GlobalOptions) {
  return { timeoutMs: Number(options.timeout ?? DEFAULT_CALL_TIMEOUT_MS) };
}

function print(options: GlobalOptions, value: unknown, human: string): void {
  console.log(options.json ? JSON.stringify(value, null, 2) : human);
}

const cli = cac("ctl");
cli.option("--config <dir>", "Where the owner's credentials live (default: $NODECORE_CONFIG or ~/.config/nodecore)");
cli.option("--owner-key <file>", "The owner's Ed25519 private key (default: <config>/owner.key)");
cli.option("--timeout <ms>", "Deadline of each call", { default: DEFAULT_CALL_TIMEOUT_MS });
cli.option("--json", "Print JSON instead of text");

cli.command("version", "Print the version").action(() => console.log(VERSION));

cli.command("genkey", "Create a new owner key and print its public key").action((options: GlobalOptions) => {
  const file = options.ownerKey ?? paths(options).ownerKey;
  const key = generateOwnerKey(file);
  const publicKey = Buffer.from(rawPublicKey(key.publicKey)).toString("hex");
  print(options, { ownerKey: file, publicKey }, `owner key written to ${file}\npublic key: ${publicKey}`);
});

cli.command("takeownership <endpoint>", "Prove the owner key to a node and save owner credentials").action(async (endpoint: string, options: GlobalOptions) => {
  const p = paths(options);
  const key = readOwnerKey(options.ownerKey ?? p.ownerKey);
  progress(`proving the owner key to ${endpoint} ...`);
  const result = await takeOwnership(endpoint, key, timeoutOf(options));
  saveCredentials(p, result);
  const curators = result.endpoints.map(formatEndpoint);
  print(options, { config: p.dir, endpoints: curators }, `took ownership; credentials saved in ${p.dir}\ncurators: ${curators.join(", ")}`);
});

cli.command("cluster [action]", "Cluster commands: info (also refreshes the saved curator list)").action(async (action: string | undefined, options: GlobalOptions) => {
  if (action !== "info") throw new UsageError(`unknown cluster action '${action ?? ""}' (expected: info)`);
  const p = paths(options);
  const credentials = loadCredentials(p, options.ownerKey);
  const { info, port } = await withFailover(Management, credentials, async (m, e) => ({ info: await m.getClusterInfo({}, timeoutOf(options)), port: e.port }), progress);
  // Curators all listen on one port: the one that answered.
  const endpoints = endpointsOfDirectory(info.clusterDirectory, port);
  if (endpoints.length) saveCredentials(p, { certificate: credentials.certificate, ca: credentials.ca, endpoints });
  const curators = endpoints.map(formatEndpoint);
  const fingerprint = new (await import("node:crypto")).X509Certificate(info.caCertificate).fingerprint256;
  print(options, { curators, caFingerprint: fingerprint }, `curators: ${curators.join(", ") || "(none)"}\nCA fingerprint (SHA-256): ${fingerprint}`);
});

cli.command("ticket", "Print the register ticket new nodes need").action(async (options: GlobalOptions) => {
  const credentials = loadCredentials(paths(options), options.ownerKey);
  const { ticket } = await withFailover(Management, credentials, (m) => m.getRegisterTicket({}, timeoutOf(options)), progress);
  const hex = Buffer.from(ticket).toString("hex");
  print(options, { ticket: hex }, hex);
});

cli
  .command("node [action] [...args]", "Node commands: list | approve <id> | roles set|unset <id> <role...>")
  .action(async (action: string | undefined, args: string[], options: GlobalOptions) => {
    const credentials = loadCredentials(paths(options), options.ownerKey);
    switch (action) {
      case "list": {
        const nodes = await withFailover(
          Management,
          credentials,
          async (m) => {
            const all = [];
            for await (const node of m.getNodes({}, timeoutOf(options))) all.push(summarize(node));
            return all;
          },
          progress,
        );
        print(options, nodes, nodeTable(nodes));
        return;
      }
      case "approve": {
        const [id] = args;
        if (!id) throw new UsageError("usage: ctl node approve <node id>");
        await withFailover(Management, credentials, (m) => m.approveNode({ id }, timeoutOf(options)), progress);
        print(options, { approved: id }, `approved ${id}`);
        return;
      }
      case "roles": {
        const [verb, id, ...roles] = args;
        if ((verb !== "set" && verb !== "unset") || !id || roles.length === 0) {
          throw new UsageError(`usage: ctl node roles set|unset <node id> <role...>  (roles: ${Object.keys(ROLE_FIELDS).join(", ")})`);
        }
        const request: Record<string, unknown> = { id };
        for (const role of roles) {
          const field = ROLE_FIELDS[role as RoleName];
          if (!field) throw new UsageError(`unknown role '${role}' (roles: ${Object.keys(ROLE_FIELDS).join(", ")})`);
          request[field] = verb === "set";
        }
        await withFailover(Management, credentials, (m) => m.updateNodeRoles(request, timeoutOf(options)), progress);
        print(options, { node: id, [verb]: roles }, `${verb === "set" ? "set" : "unset"} ${roles.join(", ")} on ${id}`);
        return;
      }
      default:
        throw new UsageError(`unknown node action '${action ?? ""}' (expected: list, approve, roles)`);
    }
  });

cli
  .command("etcd [action] [dir]", "etcd commands: credentials <dir> (a client certificate for etcdctl)")
  .action(async (action: string | undefined, dir: string | undefined, options: GlobalOptions) => {
    if (action !== "credentials" || !dir) throw new UsageError("usage: ctl etcd credentials <dir>");
    const credentials = loadCredentials(paths(options), options.ownerKey);
    const key = generateKeyPair();
    const response = await withFailover(Management, credentials, (m) => m.getEtcdCredentials({ publicKey: rawPublicKey(key.publicKey) }, timeoutOf(options)), progress);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const pem = (der: Uint8Array) => new X509Certificate(der).toString();
    writeFileSync(join(dir, "ca.pem"), pem(response.caCertificate));
    writeFileSync(join(dir, "client.pem"), pem(response.clientCertificate));
    writeFileSync(join(dir, "client.key"), privateKeyPem(key.privateKey), { mode: 0o600 });
    const example = `etcdctl --cacert ${join(dir, "ca.pem")} --cert ${join(dir, "client.pem")} --key ${join(dir, "client.key")} --endpoints https://<node address>:2379 member list`;
    print(options, { dir, example }, `etcd client credentials written to ${dir}\n${example}`);
  });

cli
  .command("params <kind> <file>", "Write node parameters: 'bootstrap' (from the owner key) or 'register' (from the cluster)")
  .action(async (kind: string, file: string, options: GlobalOptions) => {
    let params;
    if (kind === "bootstrap") {
      const key = readOwnerKey(options.ownerKey ?? paths(options).ownerKey);
      params = create(NodeParametersSchema, { cluster: { case: "clusterBootstrap", value: { ownerPublicKey: rawPublicKey(key.publicKey) } } });
    } else if (kind === "register") {
      const credentials = loadCredentials(paths(options), options.ownerKey);
      const { ticket, info } = await withFailover(
        Management,
        credentials,
        async (m) => ({ ticket: (await m.getRegisterTicket({}, timeoutOf(options))).ticket, info: await m.getClusterInfo({}, timeoutOf(options)) }),
        progress,
      );
      params = create(NodeParametersSchema, {
        cluster: { case: "clusterRegister", value: { registerTicket: ticket, ...(info.clusterDirectory ? { clusterDirectory: info.clusterDirectory } : {}), caCertificate: info.caCertificate } },
      });
    } else {
      throw new UsageError(`unknown parameters kind '${kind}' (expected: bootstrap, register)`);
    }
    // Register parameters carry the ticket: readable by their owner only.
    writeFileSync(file, toBinary(NodeParametersSchema, params), { mode: 0o600 });
    chmodSync(file, 0o600);
    print(options, { written: file, kind }, `${kind} parameters written to ${file}`);
  });

class UsageError extends Error {
  override name = "UsageError";
}

cli.help();
cli.version(VERSION);

function explain(err: unknown): string {
  if (err instanceof RpcError) {
    const hint = err.code === Status.UNAVAILABLE ? " (is the cluster up, and are the endpoints in the config dir current?)" : "";
    return `${err.details} [${Status[err.code]}]${hint}`;
  }
  return err instanceof Error ? err.message : String(err);
}

try {
  cli.parse(process.argv, { run: false });
  if (!cli.matchedCommand) {
    if (!cli.options.help && !cli.options.version) {
      cli.outputHelp();
      process.exitCode = 2;
    }
  } else {
    await cli.runMatchedCommand();
  }
} catch (err) {
  process.stderr.write(`ctl: ${explain(err)}\n`);
  process.exitCode = err instanceof UsageError || (err instanceof Error && err.name === "CACError") ? 2 : 1;
}

// Exit now that the command is done. A connection attempt to a curator that
// is down (a SYN that nobody answers, after its VM powered off) outlives the
// closed client and would keep the process alive until the kernel gives up
// on it, two minutes later.
await new Promise<void>((resolve) => process.stdout.write("", () => resolve()));
await new Promise<void>((resolve) => process.stderr.write("", () => resolve()));
process.exit(process.exitCode ?? 0);
