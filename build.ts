// The one build entry: `bun run build`.
//
//   proto/*.proto ──buf generate (local protoc-gen-es)──▶ proto/gen/
//   cmd/init/main.ts ──Bun.build --compile──▶ out/init   (the node's PID 1)
//   cmd/ctl/main.ts  ──Bun.build --compile──▶ out/ctl    (the operator CLI)
//
// Nothing is downloaded: buf and protoc-gen-es come from node_modules, and
// the executables embed bun from node_modules (@oven/bun-linux-x64).
//
// etcd3 loads its proto/rpc.proto from disk at run time, relative to its own
// folder; a compiled binary would look for it at this machine's absolute
// node_modules path. The inlineEtcdProtos plugin parses those protos here and
// puts them into the bundle, so the binaries run without node_modules.

import { $, type BunPlugin } from "bun";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import protobuf from "protobufjs";
import pkg from "./package.json";

const ROOT = import.meta.dir;
const OUT = join(ROOT, "out");
const BIN = join(ROOT, "node_modules", ".bin");

export const BINARIES = {
  init: "cmd/init/main.ts",
  ctl: "cmd/ctl/main.ts",
} as const;

/** The etcd3 call that reads protos from disk, and what replaces it. */
const ETCD_PROTO_LOAD = "(0, proto_loader_1.loadSync)(`${__dirname}/../proto/rpc.proto`, {";

const inlineEtcdProtos: BunPlugin = {
  name: "inline-etcd-protos",
  setup(build) {
    build.onLoad({ filter: /etcd3[\\/]lib[\\/]connection-pool\.js$/ }, async (args) => {
      const source = await Bun.file(args.path).text();
      if (!source.includes(ETCD_PROTO_LOAD)) {
        throw new Error(`etcd3 changed how it loads its protos; update inlineEtcdProtos in build.ts (${args.path})`);
      }
      const protoFile = join(args.path, "..", "..", "proto", "rpc.proto");
      const root = new protobuf.Root().loadSync(protoFile, { keepCase: true });
      root.resolveAll();
      const json = JSON.stringify(root.toJSON());
      return {
        contents: source.replace(ETCD_PROTO_LOAD, `(0, proto_loader_1.fromJSON)(${json}, {`),
        loader: "js",
      };
    });
  },
};

export async function generateProtos(): Promise<void> {
  console.log("build: generating protobuf code into proto/gen/");
  await $`${join(BIN, "buf")} generate proto --template proto/buf.gen.yaml`.cwd(ROOT).env({ ...process.env, PATH: `${BIN}:${process.env.PATH}` });
}

async function gitRevision(): Promise<string> {
  const result = await $`git rev-parse --short HEAD`.cwd(ROOT).quiet().nothrow();
  return result.exitCode === 0 ? result.stdout.toString().trim() : "unknown";
}

export async function compile(name: keyof typeof BINARIES, version: string): Promise<string> {
  const outfile = join(OUT, name);
  const started = performance.now();
  const result = await Bun.build({
    entrypoints: [join(ROOT, BINARIES[name])],
    compile: { outfile, autoloadDotenv: false, autoloadBunfig: false },
    target: "bun",
    format: "esm",
    minify: true,
    bytecode: true,
    sourcemap: "none",
    define: { NODECORE_VERSION: JSON.stringify(version) },
    plugins: [inlineEtcdProtos],
  });
  if (!result.success) {
    for (const log of result.logs) console.error(log);
    throw new Error(`build: compiling ${name} failed`);
  }
  const size = Bun.file(outfile).size;
  console.log(`build: out/${name} ${(size / 1e6).toFixed(1)} MB in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return outfile;
}

export async function build(): Promise<void> {
  mkdirSync(OUT, { recursive: true });
  await generateProtos();
  const version = `${pkg.version}+${await gitRevision()}`;
  for (const name of Object.keys(BINARIES) as (keyof typeof BINARIES)[]) await compile(name, version);
}

if (import.meta.main) {
  await build();
}
