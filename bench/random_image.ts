// The image the image benches move (bench/images.ts on the host,
// bench/images_qemu.ts in VMs): busybox and a layer of random bytes, so
// that nothing compresses or dedupes; a new one each run.

import { HOST_BUSYBOX, ociImage, readBusybox } from "../image/mod.ts";

/** An image of busybox and `randomBytes` random bytes under `ref`, as an OCI layout tarball. */
export function randomImage(ref: string, randomBytes: number): Uint8Array {
  const noise = new Uint8Array(randomBytes);
  for (let at = 0; at < noise.length; at += 65_536) crypto.getRandomValues(noise.subarray(at, at + 65_536));
  return ociImage(
    [ref],
    [
      [
        { kind: "dir", path: "bin", mode: 0o755 },
        { kind: "file", path: "bin/busybox", mode: 0o755, contents: readBusybox(HOST_BUSYBOX) },
      ],
      [{ kind: "file", path: "noise", mode: 0o644, contents: noise }],
    ],
    { Cmd: ["/bin/busybox", "sleep", "3600"] },
  );
}
