import { describe, expect, test } from "bun:test";
import { ImageBuildError } from "./errors.ts";
import { CPU_MODULES, loadListLine, loadOrder, moduleName, MODULE_ROOTS, parseAliases, parseModulesDep, parseSoftdepPre } from "./modules.ts";

const MODULES_DEP = `kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/crypto/crc32c_generic.ko:
kernel/drivers/md/dm-crypt.ko: kernel/drivers/md/dm-mod.ko
kernel/drivers/md/dm-mod.ko:
`;
const SOFTDEP = "softdep ext4 pre: crypto-crc32c\nsoftdep jbd2 pre: crypto-crc32c post: nothing\n";
const ALIASES = "alias crypto-crc32c crc32c_generic\nalias crc32c crc32c_generic\n";

describe("modules", () => {
  test("module names drop directories and compression and use underscores", () => {
    expect(moduleName("kernel/drivers/md/dm-crypt.ko.xz")).toBe("dm_crypt");
    expect(moduleName("kernel/fs/nls/nls_cp437.ko")).toBe("nls_cp437");
  });

  test("soft pre-dependencies parse by module, ignoring post", () => {
    expect(parseSoftdepPre(SOFTDEP).get("jbd2")).toEqual(["crypto-crc32c"]);
  });

  test("load order puts soft pre-dependencies and dependencies before each module", () => {
    const deps = parseModulesDep(MODULES_DEP);
    const providers = parseAliases(ALIASES).get("crypto-crc32c") ?? [];
    const softPre = new Map([
      ["ext4", providers],
      ["jbd2", providers],
    ]);
    const order = loadOrder(["dm_crypt", "ext4"], { deps, softPre }).map(moduleName);
    expect(order).toEqual(["dm_mod", "dm_crypt", "crc32c_generic", "crc16", "mbcache", "jbd2", "ext4"]);
  });

  test("an unknown root module is an error", () => {
    expect(() => loadOrder(["nope"], { deps: parseModulesDep(MODULES_DEP), softPre: new Map() })).toThrow(ImageBuildError);
  });

  test("modules.load names a CPU-specific module's flags after its path, and nothing after the others", () => {
    expect(loadListLine("kernel/arch/x86/crypto/aesni-intel.ko")).toBe("kernel/arch/x86/crypto/aesni-intel.ko cpu=aes");
    expect(loadListLine("kernel/arch/x86/crypto/crc32c-intel.ko")).toBe("kernel/arch/x86/crypto/crc32c-intel.ko cpu=sse4_2");
    expect(loadListLine("kernel/drivers/md/dm-crypt.ko")).toBe("kernel/drivers/md/dm-crypt.ko");
    // A module every node must have is never one the CPU may leave out.
    expect(MODULE_ROOTS.filter((m) => m in CPU_MODULES)).toEqual([]);
  });
});
