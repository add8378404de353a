// Work on many nodes at once, a few at a time, each node's result its own:
// one node's failure stops no other (ctl image import to every worker).

export type Settled<R> = { ok: true; value: R } | { ok: false; error: Error };

/**
 * Runs `fn` on every item, at most `limit` at once, and returns each item's
 * result in the items' order, whatever order they finished in. `each` is
 * told every result as it comes.
 */
export async function settleBounded<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>, each: (item: T, result: Settled<R>) => void = () => {}): Promise<Settled<R>[]> {
  if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`limit: ${limit}, not a whole number of at least 1`);
  const results = new Array<Settled<R>>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const at = next++;
      let result: Settled<R>;
      try {
        result = { ok: true, value: await fn(items[at]!) };
      } catch (err) {
        result = { ok: false, error: err instanceof Error ? err : new Error(String(err)) };
      }
      results[at] = result;
      each(items[at]!, result);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
}
