// The kubelet's image calls to containerd's CRI, for process tests on a
// host where no kubelet can run (cgroup v1): runtime.v1.ImageService
// PullImage and RemoveImage over containerd's socket, as the kubelet makes
// them, with the login its credential provider gave. Only these fields of
// the CRI messages are written (k8s.io/cri-api, api.proto):
//
//   PullImageRequest   { ImageSpec image = 1 { string image = 1 }; AuthConfig auth = 2 { username = 1; password = 2 } }
//   PullImageResponse  { string image_ref = 1 }
//   RemoveImageRequest { ImageSpec image = 1 }
//
// Test-only; a stand-in for the kubelet's client, not for containerd (the
// real one, started by startCriContainerd).

import * as grpc from "@grpc/grpc-js";
import type { Subprocess } from "bun";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { containerdConfig, runtimeBinaries, runtimeEnv, runtimePaths, type RuntimePaths } from "../../internal/containerd/mod.ts";
import { systemTree } from "../../internal/testing/mod.ts";
import type { NetworkNamespace } from "../launch/network_namespace.ts";

/** A protobuf length-delimited field. */
function field(number: number, bytes: Uint8Array): Uint8Array {
  const length: number[] = [];
  let n = bytes.length;
  do {
    length.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
    n >>>= 7;
  } while (n > 0);
  return Buffer.concat([Buffer.from([(number << 3) | 2, ...length]), bytes]);
}

const text = (value: string) => new TextEncoder().encode(value);

/** The first string field `number` of a message, if any (what a PullImageResponse holds). */
function readString(message: Uint8Array, number: number): string | undefined {
  let at = 0;
  while (at < message.length) {
    const tag = message[at++]!;
    let length = 0;
    let shift = 0;
    for (;;) {
      const byte = message[at++]!;
      length |= (byte & 0x7f) << shift;
      if (!(byte & 0x80)) break;
      shift += 7;
    }
    if ((tag & 7) !== 2) return undefined;
    const value = message.subarray(at, at + length);
    if (tag >> 3 === number) return new TextDecoder().decode(value);
    at += length;
  }
  return undefined;
}

const identity = (b: Uint8Array) => Buffer.from(b);

/** A message's fields in order: varints (wire type 0) as numbers, length-delimited ones (2) as bytes; anything else ends the read. */
function fieldsOf(message: Uint8Array): { number: number; varint?: number; bytes?: Uint8Array }[] {
  const found: { number: number; varint?: number; bytes?: Uint8Array }[] = [];
  let at = 0;
  const varint = () => {
    let value = 0;
    let shift = 0;
    for (;;) {
      const byte = message[at++]!;
      value += (byte & 0x7f) * 2 ** shift;
      if (!(byte & 0x80)) return value;
      shift += 7;
    }
  };
  while (at < message.length) {
    const tag = varint();
    const wire = tag & 7;
    if (wire === 0) found.push({ number: tag >>> 3, varint: varint() });
    else if (wire === 2) {
      const length = varint();
      found.push({ number: tag >>> 3, bytes: message.subarray(at, at + length) });
      at += length;
    } else break;
  }
  return found;
}

export class CriImages {
  readonly #client: grpc.Client;

  constructor(socket: string) {
    this.#client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
  }

  #unary(method: string, request: Uint8Array, timeoutMs: number, service = "ImageService"): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(`/runtime.v1.${service}/${method}`, identity, identity, Buffer.from(request), { deadline: Date.now() + timeoutMs }, (err, response) =>
        err ? reject(err) : resolve(response!),
      );
    });
  }

  /**
   * RuntimeService.Status, as the kubelet asks it: each condition's type and
   * whether it holds (NetworkReady is false until CRI has loaded a CNI
   * network). StatusResponse { RuntimeStatus status = 1 { repeated
   * RuntimeCondition conditions = 1 { string type = 1; bool status = 2 } } }.
   */
  async conditions(timeoutMs = 10_000): Promise<Record<string, boolean>> {
    const response = await this.#unary("Status", new Uint8Array(), timeoutMs, "RuntimeService");
    const conditions: Record<string, boolean> = {};
    for (const status of fieldsOf(response).filter((f) => f.number === 1 && f.bytes)) {
      for (const condition of fieldsOf(status.bytes!).filter((f) => f.number === 1 && f.bytes)) {
        const parts = fieldsOf(condition.bytes!);
        const type = parts.find((f) => f.number === 1 && f.bytes);
        if (type) conditions[new TextDecoder().decode(type.bytes)] = parts.find((f) => f.number === 2)?.varint === 1;
      }
    }
    return conditions;
  }

  /** PullImage, with `auth` as the kubelet sends its credential provider's answer; resolves to the image's reference (its digest). */
  async pull(image: string, auth?: { username: string; password: string }, timeoutMs = 60_000): Promise<string> {
    const spec = field(1, field(1, text(image)));
    const login = auth ? field(2, Buffer.concat([field(1, text(auth.username)), field(2, text(auth.password))])) : new Uint8Array();
    const response = await this.#unary("PullImage", Buffer.concat([spec, login]), timeoutMs);
    return readString(response, 1) ?? "";
  }

  async remove(image: string, timeoutMs = 30_000): Promise<void> {
    await this.#unary("RemoveImage", field(1, field(1, text(image))), timeoutMs);
  }

  close(): void {
    this.#client.close();
  }
}

/**
 * The built containerd (out/system) with CRI on, run in `ns` (in the host's
 * network without one) with its files below `dir`, as a worker's is when a
 * kubelet runs beside it; resolves once its socket is there. `cgroupName`
 * names its runtime cgroup.
 */
export async function startCriContainerd(
  ns: NetworkNamespace | undefined,
  dir: string,
  cgroupName: string,
): Promise<{ paths: RuntimePaths; process: Subprocess; images: CriImages; stop(): Promise<void> }> {
  const paths = runtimePaths(join(dir, "data"), join(dir, "run"), "/sys/fs/cgroup", cgroupName, systemTree());
  mkdirSync(paths.root, { recursive: true, mode: 0o700 });
  mkdirSync(paths.state, { recursive: true, mode: 0o700 });
  writeFileSync(paths.config, containerdConfig(paths, { cri: true }));
  const env = Object.entries(runtimeEnv(paths.prefix)).map(([k, v]) => `${k}=${v}`);
  const argv = ["env", ...env, runtimeBinaries(paths.prefix).containerd, "--config", paths.config];
  const process = Bun.spawn(ns ? ns.command(argv) : argv, { stdin: "ignore", stdout: "ignore", stderr: Bun.file(join(dir, "containerd.log")) });
  const images = new CriImages(paths.socket);
  const stop = async () => {
    images.close();
    process.kill();
    await process.exited;
  };
  const deadline = Date.now() + 30_000;
  while (!existsSync(paths.socket)) {
    if (process.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`containerd did not make its socket ${paths.socket}; see ${join(dir, "containerd.log")}`);
    }
    await Bun.sleep(100);
  }
  return { paths, process, images, stop };
}
