// Kernel modules the node needs, staged for the initramfs.
//
//   MODULE_ROOTS ──closure over the kernel's modules.dep──▶ set of modules
//        │                                                     │
//        │        copy (decompress .ko.xz/.zst/.gz to .ko) ◀───┘
//        ▼
//   <stage>/lib/modules/<release>/kernel/**.ko ──depmod -b <stage>──▶ modules.dep,
//        modules.softdep, modules.alias ──DFS, pre-softdeps first──▶ modules.load
//
// The guest has no modprobe (and no decompressor): it loads modules.load top
// to bottom with finit_module(2), so everything here is plain .ko and the
// order already honours hard dependencies and soft "pre:" dependencies.
// Nothing outside the closure of MODULE_ROOTS is shipped; a soft dependency
// is an ordering hint only and never pulls a module in.

import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";
import type { KernelTree } from "./kernel.ts";
import { GUEST_MODULE_LOAD_LIST } from "./layout.ts";

/**
 * What the node loads, by module name, in the order it prefers. Dependencies
 * (virtio, virtio_ring, fat, jbd2, mbcache, crc16, dm_mod, ...) follow from
 * modules.dep. AES, SHA-256, HMAC and CBC are built into Debian's kernel, in
 * their generic C versions; CPU_MODULES adds the CPU's own instructions.
 */
export const MODULE_ROOTS = [
  "virtio_pci", // the PCI transport every virtio device below sits on
  "virtio_blk", // the node's disk
  "virtio_net", // the node's network
  "qemu_fw_cfg", // /sys/firmware/qemu_fw_cfg: node parameters from the launcher
  "nls_cp437", // FAT's default codepage (CONFIG_FAT_DEFAULT_CODEPAGE=437)
  "nls_ascii", // FAT's default iocharset (CONFIG_FAT_DEFAULT_IOCHARSET="ascii")
  "nls_utf8", // for mounting the ESP with iocharset=utf8
  "vfat", // the ESP
  "crc32c_generic", // crypto "crc32c": ext4/jbd2 metadata checksums (softdep, requested at mount)
  "ext4", // the data filesystem
  "quota_v2", // ext4's project quotas (persistent volumes' limits); without it a quota file system does not mount
  "ecb", // xts(aes) is built on ecb(aes) (softdep of xts)
  "xts", // aes-xts-plain64, cryptsetup's LUKS2 default cipher
  "dm_crypt", // the encrypted data partition
  "dm_verity", // the booted slot's system image, checked against its root hash
  "overlay", // containerd's overlayfs snapshotter (Kubernetes worker role)
  "bridge", // the pods' bridge (the CNI bridge plugin; stp and llc follow)
  "veth", // each pod's link to that bridge
  "wireguard", // the cluster network's mesh between workers (internal/clusternet)
  // kube-proxy's nftables mode (Services): its tables' chains, NAT, conntrack
  // matches, random endpoint choice, masquerade, local-address checks, rejects.
  "nf_tables",
  "nft_chain_nat",
  "nft_ct",
  "nft_nat",
  "nft_masq",
  "nft_numgen",
  "nft_fib_inet",
  "nft_fib_ipv4",
  "nft_fib_ipv6",
  "nft_reject_inet",
  "nft_reject_ipv4", // kube-proxy runs dual-stack where the kernel has IPv6: both families' rejects
  "nft_reject_ipv6",
  // ctnetlink: kube-proxy lists and clears conntrack entries through it when a
  // UDP Service's endpoints change (without it every such sync logs EINVAL,
  // nfnetlink's answer for a subsystem it lacks, and stale DNS flows stay).
  "nf_conntrack_netlink",
  // NetworkPolicy (internal/kubernetes/network_policy.ts): new connections of
  // selected pods queued to the enforcer, and the pods' bridged packets seen
  // by the IP hooks at all.
  "nft_queue",
  "nfnetlink_queue",
  "br_netfilter",
  "squashfs", // the system image (image/system.ts)
  "af_alg", // AF_ALG sockets: libcryptsetup runs keyslot crypto in the kernel
  "algif_skcipher",
  "algif_hash",
  "button", // ACPI power button: qemu's system_powerdown becomes KEY_POWER
  "evdev", // /dev/input/event*: where PID 1 reads the power button
] as const;

/**
 * The CPU's own instructions for what the node's storage encrypts and
 * hashes, by module, with the /proc/cpuinfo flags each needs. Debian builds
 * them as modules, and without them the kernel's generic C code serves:
 * dm-crypt's aes-xts on every byte of the data partition (containerd's
 * content and snapshots, etcd, volumes), dm-verity's sha256 on every block
 * of the system image, ext4's crc32c on its metadata. modules.load names
 * the flags after the path, and the node loads each only where the CPU has
 * them (internal/sys/kmod.ts); each module also refuses to load without
 * them. Their dependencies (crypto_simd, cryptd) load anywhere.
 */
export const CPU_MODULES: Readonly<Record<string, readonly string[]>> = {
  aesni_intel: ["aes"], // AES-NI: xts(aes) for dm-crypt
  sha256_ssse3: ["ssse3"], // SSSE3, AVX2 or SHA-NI, the best there is: sha256 for dm-verity
  crc32c_intel: ["sse4_2"], // SSE4.2's crc32 instruction: ext4's and jbd2's checksums
};

/** What modules.load says of a module: its path, and the CPU flags it needs after it. */
export function loadListLine(path: string): string {
  const flags = CPU_MODULES[moduleName(path)];
  return flags ? `${path} cpu=${flags.join(",")}` : path;
}

const MODULE_SUFFIX = /\.ko(\.xz|\.zst|\.gz)?$/;

/** The argv that decompresses a module file to stdout, by suffix. */
function decompressorFor(path: string): readonly string[] | undefined {
  if (path.endsWith(".ko.xz")) return ["xz", "-dc", path];
  if (path.endsWith(".ko.zst")) return ["zstd", "-dcq", path];
  if (path.endsWith(".ko.gz")) return ["gzip", "-dc", path];
  return undefined;
}

/** A module's name as the kernel knows it: kernel/fs/nls/nls_cp437.ko.xz → nls_cp437. */
export function moduleName(relPath: string): string {
  const base = relPath.slice(relPath.lastIndexOf("/") + 1);
  return base.replace(MODULE_SUFFIX, "").replaceAll("-", "_");
}

/** modules.dep: each module's path and the paths of everything it needs. */
export function parseModulesDep(text: string): Map<string, string[]> {
  const deps = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const colon = line.indexOf(":");
    if (colon < 0) continue;
    const rest = line.slice(colon + 1).trim();
    deps.set(line.slice(0, colon), rest ? rest.split(/\s+/) : []);
  }
  return deps;
}

/** modules.softdep: each module's "pre:" names (module names or aliases). */
export function parseSoftdepPre(text: string): Map<string, string[]> {
  const pre = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const words = line.trim().split(/\s+/);
    if (words[0] !== "softdep" || words[1] === undefined) continue;
    const names: string[] = [];
    let inPre = false;
    for (const word of words.slice(2)) {
      if (word.endsWith(":")) inPre = word === "pre:";
      else if (inPre) names.push(word);
    }
    const module = words[1].replaceAll("-", "_");
    pre.set(module, [...(pre.get(module) ?? []), ...names]);
  }
  return pre;
}

/** modules.alias: alias → module names providing it (exact aliases only). */
export function parseAliases(text: string): Map<string, string[]> {
  const aliases = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const [word, alias, module] = line.trim().split(/\s+/);
    if (word !== "alias" || alias === undefined || module === undefined) continue;
    aliases.set(alias, [...(aliases.get(alias) ?? []), module.replaceAll("-", "_")]);
  }
  return aliases;
}

/**
 * The load order of a set of modules: depth first, each module after its
 * soft "pre:" dependencies (those shipped) and its modules.dep entries.
 * roots keeps its order wherever dependencies allow.
 */
export function loadOrder(roots: readonly string[], { deps, softPre }: { deps: ReadonlyMap<string, readonly string[]>; softPre: ReadonlyMap<string, readonly string[]> }): string[] {
  const byName = new Map([...deps.keys()].map((path) => [moduleName(path), path]));
  const order: string[] = [];
  const state = new Map<string, "visiting" | "done">();
  const visit = (path: string, chain: readonly string[]): void => {
    const seen = state.get(path);
    if (seen === "done") return;
    if (seen === "visiting") throw new ImageBuildError(`module dependency cycle: ${[...chain, path].join(" -> ")}`);
    state.set(path, "visiting");
    for (const name of softPre.get(moduleName(path)) ?? []) {
      const pre = byName.get(name);
      if (pre !== undefined) visit(pre, [...chain, path]);
    }
    for (const dep of deps.get(path) ?? []) visit(dep, [...chain, path]);
    state.set(path, "done");
    order.push(path);
  };
  for (const root of roots) {
    const path = byName.get(root);
    if (path === undefined) throw new ImageBuildError(`no kernel module named ${root}`);
    visit(path, []);
  }
  return order;
}

export interface StagedModules {
  release: string;
  /** The staged tree, laid out as the guest sees it: <dir>/lib/modules/<release>/. */
  dir: string;
  /** Paths relative to the modules dir, in load order (what modules.load names, each line with loadListLine's CPU flags). */
  loadOrder: string[];
  /** Soft "pre:" dependencies of shipped modules that nothing shipped provides. */
  unmetSoftdeps: string[];
}

/** The files of a staged modules dir that go into the initramfs. */
export const SHIPPED_INDEX_FILES = ["modules.dep", "modules.softdep", "modules.alias", "modules.builtin", GUEST_MODULE_LOAD_LIST] as const;

/**
 * Stages the closure of the roots (default MODULE_ROOTS and CPU_MODULES) from the unpacked
 * kernel into stageDir (which is replaced), plain .ko only, with depmod's
 * index and modules.load.
 */
export async function stageModules(kernel: KernelTree, { stageDir, roots = [...MODULE_ROOTS, ...Object.keys(CPU_MODULES)] }: { stageDir: string; roots?: readonly string[] }): Promise<StagedModules> {
  const fullDeps = parseModulesDep(readFileSync(join(kernel.modulesDir, "modules.dep"), "utf8"));
  const byName = new Map([...fullDeps.keys()].map((path) => [moduleName(path), path]));

  const closure = new Set<string>();
  for (const root of roots) {
    const path = byName.get(root);
    if (path === undefined) throw new ImageBuildError(`no kernel module named ${root} in ${kernel.release}`);
    closure.add(path);
    for (const dep of fullDeps.get(path) ?? []) closure.add(dep);
  }

  rmSync(stageDir, { recursive: true, force: true });
  const modulesDir = join(stageDir, "lib/modules", kernel.release);
  for (const path of closure) {
    const source = join(kernel.modulesDir, path);
    const dest = join(modulesDir, path.replace(MODULE_SUFFIX, ".ko"));
    mkdirSync(dirname(dest), { recursive: true });
    const decompress = decompressorFor(path);
    if (decompress) await run(decompress, { stdoutFile: dest });
    else copyFileSync(source, dest);
  }
  for (const index of ["modules.builtin", "modules.builtin.modinfo", "modules.order"]) {
    const source = join(kernel.modulesDir, index);
    if (existsSync(source)) copyFileSync(source, join(modulesDir, index));
  }
  await run(["depmod", "-b", stageDir, kernel.release]);

  const deps = parseModulesDep(readFileSync(join(modulesDir, "modules.dep"), "utf8"));
  for (const [path, needs] of deps) {
    for (const dep of needs) {
      if (!deps.has(dep)) throw new ImageBuildError(`staged module ${path} needs ${dep}, which is not staged`);
    }
  }
  const aliases = parseAliases(readFileSync(join(modulesDir, "modules.alias"), "utf8"));
  const shipped = new Set([...deps.keys()].map(moduleName));
  const softPre = new Map<string, string[]>();
  const unmetSoftdeps: string[] = [];
  for (const [module, names] of parseSoftdepPre(readFileSync(join(modulesDir, "modules.softdep"), "utf8"))) {
    if (!shipped.has(module)) continue;
    const resolved: string[] = [];
    for (const name of names) {
      const providers = [name.replaceAll("-", "_"), ...(aliases.get(name) ?? [])].filter((m) => shipped.has(m));
      if (providers.length === 0) unmetSoftdeps.push(`${module} pre: ${name}`);
      resolved.push(...providers);
    }
    softPre.set(module, resolved);
  }

  const order = loadOrder(roots, { deps, softPre });
  writeFileSync(join(modulesDir, GUEST_MODULE_LOAD_LIST), order.map(loadListLine).join("\n") + "\n");
  return { release: kernel.release, dir: stageDir, loadOrder: order, unmetSoftdeps };
}
