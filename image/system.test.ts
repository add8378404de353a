// The system image's Kubernetes binaries (bun run image --kubernetes DIR):
// what is accepted, what is refused and why, and that they land in the
// squashfs where nodes look for them.

import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../internal/testing/mod.ts";
import { installKubeStub } from "../test/support/kube_stub/install.ts";
import { ImageBuildError } from "./errors.ts";
import { KUBERNETES_BINARIES, buildSystemImage, kubernetesBinaries, systemContents } from "./system.ts";

const dir = tempDir("nodecore-system-");
afterAll(() => dir[Symbol.dispose]());

/** A directory of "Kubernetes binaries": copies of an ELF executable (real ones are in neither npm nor Debian). */
function elfBinaries(name: string, which: readonly string[] = KUBERNETES_BINARIES): string {
  const path = join(dir.path, name);
  mkdirSync(path, { recursive: true });
  for (const binary of which) {
    copyFileSync("/bin/true", join(path, binary));
    chmodSync(join(path, binary), 0o755);
  }
  return path;
}

function refusal(kubernetesDir: string): string {
  try {
    kubernetesBinaries(kubernetesDir);
  } catch (error) {
    expect(error).toBeInstanceOf(ImageBuildError);
    return (error as Error).message;
  }
  throw new Error("accepted");
}

describe("Kubernetes binaries in the system image", () => {
  test("the test stand-in is refused, by name", () => {
    const stub = join(dir.path, "stub");
    installKubeStub(stub);
    copyFileSync("/bin/true", join(stub, "kubelet"));
    expect(refusal(stub)).toBe(
      `--kubernetes ${stub}: kube-apiserver is the test stand-in (kube-stub), not a Kubernetes binary; kube-controller-manager is the test stand-in (kube-stub), not a Kubernetes binary; kube-scheduler is the test stand-in (kube-stub), not a Kubernetes binary (needed: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet)`,
    );
  });

  test("a missing binary and a non-ELF file are named", () => {
    const partial = elfBinaries("partial", ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]);
    expect(refusal(partial)).toContain("kubelet is missing");
    const script = elfBinaries("script");
    Bun.write(join(script, "kube-scheduler"), "#!/bin/sh\nexit 0\n");
    expect(refusal(script)).toContain("kube-scheduler is not an ELF executable");
  });

  test("all four ELF executables go to /kubernetes/bin in the squashfs, executable", async () => {
    const good = elfBinaries("good");
    const contents = systemContents(good);
    expect(contents.files.filter((f) => f.path.startsWith("/kubernetes/bin/")).map((f) => [f.path, f.mode])).toEqual(
      KUBERNETES_BINARIES.map((b) => [`/kubernetes/bin/${b}`, 0o755]),
    );
    // Without --kubernetes the image has none of them.
    expect(systemContents().files.some((f) => f.path.startsWith("/kubernetes/"))).toBe(false);
    const image = join(dir.path, "system.squashfs");
    // Only these files, to keep the test quick (the runtime's are another 96 MB to compress).
    await buildSystemImage({ files: contents.files.filter((f) => f.path.startsWith("/kubernetes/")), sources: [] }, join(dir.path, "stage"), image);
    const listing = Bun.spawnSync(["unsquashfs", "-lls", image]).stdout.toString();
    for (const binary of KUBERNETES_BINARIES) expect(listing).toMatch(new RegExp(`-rwxr-xr-x root/root .* squashfs-root/kubernetes/bin/${binary}\\n`));
  }, 60_000);
});
