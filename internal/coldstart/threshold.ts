// How many shares open a consensus member's data key. Its own file, free of
// crypto imports, so that ctl can say it without loading them.

/** The most holders a split can have, and so the largest threshold that means anything (shamir-secret-sharing's limit). */
export const MAX_UNLOCK_SHARE_THRESHOLD = 255;

/** The default threshold: a majority of the other consensus members, at least 1. */
export function defaultThreshold(holders: number): number {
  return Math.max(1, Math.floor(holders / 2) + 1);
}

/** The threshold a split uses: the configured one (0: the default), never more than there are holders. */
export function effectiveThreshold(configured: number, holders: number): number {
  if (holders < 1) throw new Error("a split needs at least one holder");
  return configured > 0 ? Math.min(configured, holders) : defaultThreshold(holders);
}

/** One line for people: how a consensus member of a cluster with `members` of them opens its data at a cold start. */
export function describeColdStart(members: number, configured: number): string {
  if (members <= 1) return "disk alone unlocks (one consensus member; a second one turns threshold shares on)";
  const others = members - 1;
  const t = effectiveThreshold(configured, others);
  // A threshold above the holders cannot be met: the split takes all of them, and the owner is told.
  const rule =
    configured > others
      ? `configured threshold ${configured}, more than the ${others} others there are: all of them until more join`
      : configured > 0
        ? `configured threshold ${configured}`
        : "a majority";
  return `each consensus member needs shares from any ${t} of the other ${others} (${rule}); no disk alone opens its data`;
}
