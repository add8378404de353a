// The bare floor for bench/boot.ts: a stand-in node init that says one line
// and powers the VM off at once. Booted on the same kernel with the same
// initramfs contents as the node (only /init.bin differs), it shows what the
// kernel, the initramfs and starting a bun-compiled binary cost by
// themselves. bench/boot.ts compiles it with `bun build --compile`; it does
// anything only as PID 1 (run on a host, it would otherwise power it off).
// The image build asks every init for `--version` (the slot's build name):
// it answers that as the real init does, and nothing else off PID 1.

import { reboot } from "../internal/sys/mod.ts";

if (process.argv[2] === "--version") {
  process.stdout.write("floor-stand-in\n");
  process.exit(0);
}
if (process.pid !== 1) {
  process.stderr.write("floor_init: not PID 1, doing nothing (this is a VM's stand-in init)\n");
  process.exit(2);
}
process.stdout.write("floor: init started, powering off\n");
reboot("poweroff");
