// "Did you mean ...?": the known word nearest to a mistyped one.

/** Levenshtein distance, with a swap of two neighbours counting as one edit ("lsit" is one from "list"). */
export function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) rows[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      rows[i]![j] = d;
    }
  }
  return rows[a.length]![b.length]!;
}

/**
 * The candidate nearest to `word`, if one is near enough to be what was
 * meant: at most one edit in three letters ("nod" finds "node", "aprove"
 * finds "approve", "c" finds nothing), or the word is the start of just
 * one candidate ("take" for "takeownership"). Ties go to the candidate
 * listed first.
 */
export function nearest(word: string, candidates: readonly string[]): string | undefined {
  const prefixed = candidates.filter((c) => word.length >= 2 && c.startsWith(word));
  if (prefixed.length === 1) return prefixed[0];
  const bound = Math.floor(word.length / 3);
  let best: { candidate: string; distance: number } | undefined;
  for (const candidate of candidates) {
    const distance = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (bound > 0 && distance <= bound && (best === undefined || distance < best.distance)) best = { candidate, distance };
  }
  return best?.candidate;
}
