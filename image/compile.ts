// Compiling the two executables (cmd/init, cmd/ctl) with Bun.build --compile:
// the root build.ts and the image build (a test build with its own version
// or fault) both compile through here.
//
// etcd3 loads its proto/rpc.proto from disk at run time, relative to its own
// folder; a compiled binary would look for it at this machine's absolute
// node_modules path. The inlineEtcdProtos plugin parses those protos here and
// puts them into the bundle, so the binaries run without node_modules. It
// also builds etcd3's gRPC service definitions with less work than
// proto-loader: proto-loader describes every message for gRPC reflection
// (descriptors encoded at load time), which grpc-js's clients never read
// and which was most of the etcd client's load time.

import type { BunPlugin } from "bun";
import { join, relative } from "node:path";
import protobuf from "protobufjs";

const ROOT = join(import.meta.dir, "..");
const OUT = join(ROOT, "out");

export const BINARIES = {
  init: "cmd/init/main.ts",
  ctl: "cmd/ctl/main.ts",
} as const;

/** The etcd3 call that reads protos from disk, and what replaces it. */
const ETCD_PROTO_LOAD = "(0, proto_loader_1.loadSync)(`${__dirname}/../proto/rpc.proto`, {";

/**
 * Builds what grpc.loadPackageDefinition needs for clients from a protobufjs
 * JSON root: per service, its methods' paths, stream flags and (de)serialisers,
 * with proto-loader's semantics (fromObject/encode out; decode/toObject in,
 * with etcd3's conversion options). Message entries are left out: etcd3 uses
 * only the service constructors. Injected as JavaScript into etcd3's module.
 */
const ETCD_SERVICE_DEFINITIONS = `(function etcdServiceDefinitions(json, options) {
  const protobuf = require("protobufjs");
  const root = protobuf.Root.fromJSON(json);
  root.resolveAll();
  const definition = {};
  const visit = (namespace, prefix) => {
    for (const child of namespace.nestedArray) {
      const name = prefix ? prefix + "." + child.name : child.name;
      if (child instanceof protobuf.Service) {
        const methods = {};
        for (const method of child.methodsArray) {
          const request = method.resolvedRequestType;
          const response = method.resolvedResponseType;
          methods[method.name] = {
            path: "/" + name + "/" + method.name,
            requestStream: Boolean(method.requestStream),
            responseStream: Boolean(method.responseStream),
            requestSerialize: (value) => request.encode(request.fromObject(value)).finish(),
            requestDeserialize: (bytes) => request.toObject(request.decode(bytes), options),
            responseSerialize: (value) => response.encode(response.fromObject(value)).finish(),
            responseDeserialize: (bytes) => response.toObject(response.decode(bytes), options),
            originalName: method.name.charAt(0).toLowerCase() + method.name.slice(1),
          };
        }
        definition[name] = methods;
      } else if (child.nestedArray) {
        visit(child, name);
      }
    }
  };
  visit(root, "");
  return definition;
})`;

const inlineEtcdProtos: BunPlugin = {
  name: "inline-etcd-protos",
  setup(build) {
    build.onLoad({ filter: /etcd3[\\/]lib[\\/]connection-pool\.js$/ }, async (args) => {
      const source = await Bun.file(args.path).text();
      if (!source.includes(ETCD_PROTO_LOAD)) {
        throw new Error(`etcd3 changed how it loads its protos; update inlineEtcdProtos in image/compile.ts (${args.path})`);
      }
      const protoFile = join(args.path, "..", "..", "proto", "rpc.proto");
      const root = new protobuf.Root().loadSync(protoFile, { keepCase: true });
      root.resolveAll();
      const json = JSON.stringify(root.toJSON());
      return {
        contents: source.replace(ETCD_PROTO_LOAD, `${ETCD_SERVICE_DEFINITIONS}(${json}, {`),
        loader: "js",
      };
    });
  },
};

export interface CompileOptions {
  /** Where the executable goes (default: out/<name>). */
  outfile?: string;
  /** A named test fault compiled in (internal/version TEST_FAULTS): only for test builds of a deliberately broken version. */
  testFault?: string;
}

export async function compile(name: keyof typeof BINARIES, version: string, options: CompileOptions = {}): Promise<string> {
  const outfile = options.outfile ?? join(OUT, name);
  const started = performance.now();
  const result = await Bun.build({
    entrypoints: [join(ROOT, BINARIES[name])],
    compile: { outfile, autoloadDotenv: false, autoloadBunfig: false },
    target: "bun",
    format: "esm",
    minify: true,
    bytecode: true,
    sourcemap: "none",
    define: { NODECORE_VERSION: JSON.stringify(version), NODECORE_TEST_FAULT: JSON.stringify(options.testFault ?? "") },
    plugins: [inlineEtcdProtos],
  });
  if (!result.success) {
    for (const log of result.logs) console.error(log);
    throw new Error(`build: compiling ${name} failed`);
  }
  const size = Bun.file(outfile).size;
  console.log(`build: ${relative(ROOT, outfile)} ${(size / 1e6).toFixed(1)} MB in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return outfile;
}
