// Debian packages the build needs on the host, installed if missing.

import { run } from "./exec.ts";

/** What the image build runs or copies from the host. */
export const BUILD_PACKAGES = [
  "apt", // apt-get download / apt-cache: fetching the kernel package
  "dpkg", // dpkg -x: unpacking it without installing (never touches /boot)
  "kmod", // depmod: module dependency order
  "xz-utils", // kernel payload and .ko.xz decompression
  "zstd", // the same, for kernels built with zstd
  "lz4", // compressing the initramfs
  "gcc", // compiling the static pre-init, the pause program and runc (cgo)
  "libc6-dev", // their static libc
  "libseccomp-dev", // runc's seccomp support, linked statically (image/upstream)
  "pkg-config", // how runc's build finds libseccomp
  "e2fsprogs", // mke2fs/e2fsck/tune2fs, shipped in the initramfs
  "cryptsetup-bin", // cryptsetup and veritysetup, shipped in the initramfs; veritysetup also builds the system image's hash tree
  "nftables", // nft, shipped in the initramfs for kube-proxy
  "chrony", // chronyd, shipped in the initramfs for time sync
  "busybox-static", // the busybox container image, and the kubelet's mount/umount
  "squashfs-tools", // mksquashfs: the system image
  "dosfstools", // mkfs.vfat for the ESP; fsck.fat, shipped in the initramfs
  "mtools", // mcopy: slot a's boot files onto the ESP, without mounting it
  "gdisk", // sgdisk for the GPT
] as const;

/** What booting the image needs (the boot smoke test). */
export const BOOT_PACKAGES = ["qemu-system-x86"] as const;

async function isInstalled(pkg: string): Promise<boolean> {
  const result = await run(["dpkg", "-s", pkg], { okExitCodes: [0, 1] });
  return result.exitCode === 0 && /^Status: install ok installed$/m.test(result.stdout);
}

/**
 * Installs the packages that are not installed yet (idempotent: checks
 * `dpkg -s`, runs nothing when all are present). Returns the ones installed.
 */
export async function ensurePackages(packages: readonly string[]): Promise<string[]> {
  const missing: string[] = [];
  for (const pkg of packages) if (!(await isInstalled(pkg))) missing.push(pkg);
  if (missing.length === 0) return [];
  await run(["apt-get", "install", "-y", "--no-install-recommends", ...missing], {
    env: { DEBIAN_FRONTEND: "noninteractive" },
    inherit: true,
  });
  return missing;
}
