// The accelerator probe's decisions, with stand-ins for qemu (shell scripts
// that behave as qemu does under a working KVM, a KVM that hangs the guest,
// and a KVM qemu cannot open) and for /dev/kvm (a missing path, a file).
// The real probe on this machine's /dev/kvm and kernel runs in the e2e
// (test/e2e/node_boot.e2e.ts), where the node image is built.

import { describe, expect, test } from "bun:test";
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../internal/testing/mod.ts";
import { accelArgs, chooseAccelerator, AcceleratorError } from "./accel.ts";

function fakeQemu(dir: string, name: string, script: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${script}\n`);
  chmodSync(path, 0o755);
  return path;
}

describe("choosing the accelerator", () => {
  test("KVM when a kernel boots under it to its root-fs panic; the reason says how fast", async () => {
    using dir = tempDir();
    const device = join(dir.path, "kvm");
    writeFileSync(device, "");
    const qemu = fakeQemu(dir.path, "qemu", 'echo "Linux version 6.1"; echo "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"; sleep 5');
    const choice = await chooseAccelerator({ kernel: "/k", device, qemu, cacheFile: null, timeoutMs: 3_000 });
    expect(choice.accel).toBe("kvm");
    expect(choice.reason).toMatch(/^KVM works here \(a kernel booted under it in \d+\.\d s\)$/);
  });

  test("TCG when /dev/kvm is missing, without starting qemu; --accel kvm is refused naming why", async () => {
    using dir = tempDir();
    const marker = join(dir.path, "ran");
    const qemu = fakeQemu(dir.path, "qemu", `touch ${marker}`);
    const options = { kernel: "/k", device: join(dir.path, "no-kvm"), qemu, cacheFile: null };
    const choice = await chooseAccelerator(options);
    expect(choice).toEqual({ accel: "tcg", reason: `software emulation, because ${options.device} is missing (no kvm module loaded, or a VM without nested virtualization)` });
    expect(existsSync(marker)).toBe(false);
    const refused = await chooseAccelerator({ ...options, asked: "kvm" }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AcceleratorError);
    expect((refused as Error).message).toBe(`--accel kvm: KVM cannot run a guest on this host: ${options.device} is missing (no kvm module loaded, or a VM without nested virtualization)`);
  });

  test("TCG when the device opens but the guest makes no progress (this build machine's case)", async () => {
    using dir = tempDir();
    const device = join(dir.path, "kvm");
    writeFileSync(device, "");
    const qemu = fakeQemu(dir.path, "qemu", 'echo "SeaBIOS (version 1.16.2)"; echo "Booting from ROM..."; exec sleep 30');
    const started = performance.now();
    const choice = await chooseAccelerator({ kernel: "/k", device, qemu, cacheFile: null, timeoutMs: 500 });
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(choice).toEqual({ accel: "tcg", reason: `software emulation, because ${device} opens, but a kernel under KVM did not boot within 0.5 s` });
  });

  test("TCG when qemu cannot use KVM, with qemu's own words", async () => {
    using dir = tempDir();
    const device = join(dir.path, "kvm");
    writeFileSync(device, "");
    const qemu = fakeQemu(dir.path, "qemu", 'echo "Could not access KVM kernel module: Permission denied" >&2; echo "qemu-system-x86_64: failed to initialize kvm: Permission denied" >&2; exit 1');
    const choice = await chooseAccelerator({ kernel: "/k", device, qemu, cacheFile: null, timeoutMs: 3_000 });
    expect(choice.accel).toBe("tcg");
    expect(choice.reason).toStartWith("software emulation, because qemu -accel kvm exited with code 1: ");
    expect(choice.reason).toContain("failed to initialize kvm: Permission denied");
  });

  test("TCG when qemu aborts under KVM: one line, naming the signal and qemu's error (this host's qemu on 2026-12-01)", async () => {
    using dir = tempDir();
    const device = join(dir.path, "kvm");
    writeFileSync(device, "");
    const qemu = fakeQemu(
      dir.path,
      "qemu",
      'echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2; echo "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion \\`ret == cpu->kvm_msr_buf->nmsrs\' failed." >&2; kill -ABRT $$',
    );
    const choice = await chooseAccelerator({ kernel: "/k", device, qemu, cacheFile: null, timeoutMs: 3_000 });
    expect(choice).toEqual({ accel: "tcg", reason: "software emulation, because qemu -accel kvm was killed by SIGABRT: qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" });
  });

  test("--accel tcg is taken as asked without probing", async () => {
    using dir = tempDir();
    const marker = join(dir.path, "ran");
    const device = join(dir.path, "kvm");
    writeFileSync(device, "");
    const choice = await chooseAccelerator({ kernel: "/k", device, qemu: fakeQemu(dir.path, "qemu", `touch ${marker}`), cacheFile: null, asked: "tcg" });
    expect(choice).toEqual({ accel: "tcg", reason: "as asked (--accel tcg)" });
    expect(existsSync(marker)).toBe(false);
  });

  test("the decision is cached for the same host boot, device and qemu; another qemu probes again", async () => {
    using dir = tempDir();
    const device = join(dir.path, "kvm");
    writeFileSync(device, "");
    const count = join(dir.path, "count");
    const script = `echo x >> ${count}; echo "Kernel panic - not syncing: VFS: Unable to mount root fs"`;
    const qemu = fakeQemu(dir.path, "qemu", script);
    const cacheFile = join(dir.path, "accel.json");
    const first = await chooseAccelerator({ kernel: "/k", device, qemu, cacheFile, timeoutMs: 3_000 });
    const second = await chooseAccelerator({ kernel: "/k", device, qemu, cacheFile, timeoutMs: 3_000 });
    expect(second).toEqual(first);
    expect(readFileSync(count, "utf8")).toBe("x\n");
    await chooseAccelerator({ kernel: "/k", device, qemu: fakeQemu(dir.path, "qemu2", script), cacheFile, timeoutMs: 3_000 });
    expect(readFileSync(count, "utf8")).toBe("x\nx\n");
  });

  test("qemu's arguments: the host's CPU under KVM, -cpu max under TCG", () => {
    expect(accelArgs("kvm")).toEqual(["-accel", "kvm", "-cpu", "host"]);
    expect(accelArgs("tcg")).toEqual(["-accel", "tcg", "-cpu", "max"]);
  });
});
