// One writer at a time on a file system that is sometimes filled on
// purpose. While scrubFreeSpace has the ESP full of zeros, every other write
// there fails with ENOSPC: a qemu fault run saw a HoldShare refused that way
// ("no space left on device") while the node scrubbed after its cold-start
// key left the ESP, and two scrubs (the sealed-configuration and cold-start
// workers both start one) would share one filler file. So the scrub and
// every write to the ESP after enrolment go through exclusively(esp, ...):
// each waits for the one before it, in call order, in this process.

const tails = new Map<string, Promise<void>>();

/** Runs `work` once every earlier call for the same `fileSystem` (its mount point) has finished. */
export async function exclusively<T>(fileSystem: string, work: () => T | Promise<T>): Promise<T> {
  const before = tails.get(fileSystem) ?? Promise.resolve();
  const mine = before.then(work);
  const tail = mine.then(
    () => {},
    () => {},
  );
  tails.set(fileSystem, tail);
  try {
    return await mine;
  } finally {
    if (tails.get(fileSystem) === tail) tails.delete(fileSystem);
  }
}
