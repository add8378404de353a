// How many refused calls an audit trail records one by one: at most
// `perCaller` from one caller and `overall` from everyone in a minute of
// the clock; the rest are counted, and said in one line when the next
// minute begins. So refusals, which anyone can cause without a
// certificate, cost a trail a bounded number of writes, however many
// callers they come from, and never take the place of what an owner did
// (the trails keep those apart: internal/curator/audit.ts,
// internal/roleserve/report_calls.ts).

/** How many callers a minute's count names at most (beyond: "at least"). */
const CALLERS_COUNTED = 10_000;

/** What a minute left out: refusals not recorded one by one, and from how many callers. */
export interface LeftOut {
  refusals: number;
  callers: number;
  /** More callers than CALLERS_COUNTED: `callers` is a lower bound. */
  atLeast: boolean;
}

export class RefusalBudget {
  private minute = Number.NaN;
  private readonly perCallerCounts = new Map<string, number>();
  private total = 0;
  private over = 0;
  private readonly overCallers = new Set<string>();

  constructor(
    readonly perCaller: number,
    readonly overall: number,
    private readonly now: () => number = () => Date.now(),
  ) {}

  /**
   * Whether one more refusal from `caller` is recorded one by one. When a
   * new minute begins, `leftOut` says what the last one did not record.
   */
  admit(caller: string): { admit: boolean; leftOut?: LeftOut } {
    const minute = Math.floor(this.now() / 60_000);
    let leftOut: LeftOut | undefined;
    if (minute !== this.minute) {
      if (this.over > 0) leftOut = { refusals: this.over, callers: this.overCallers.size, atLeast: this.overCallers.size >= CALLERS_COUNTED };
      this.minute = minute;
      this.perCallerCounts.clear();
      this.total = 0;
      this.over = 0;
      this.overCallers.clear();
    }
    const mine = this.perCallerCounts.get(caller) ?? 0;
    const admit = this.total < this.overall && mine < this.perCaller;
    if (admit) {
      this.total++;
      this.perCallerCounts.set(caller, mine + 1);
    } else {
      this.over++;
      if (this.overCallers.size < CALLERS_COUNTED) this.overCallers.add(caller);
    }
    return leftOut ? { admit, leftOut } : { admit };
  }
}

/** The line that stands for a minute's left-out refusals. */
export function leftOutLine(leftOut: LeftOut): string {
  const callers = `${leftOut.atLeast ? "at least " : ""}${leftOut.callers} caller${leftOut.callers === 1 ? "" : "s"}`;
  return `and ${leftOut.refusals} more refused call${leftOut.refusals === 1 ? "" : "s"} from ${callers} in that minute, not recorded one by one`;
}
