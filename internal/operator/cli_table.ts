// The tables a command line is made of: commands, their actions, and the
// arguments and flags of each. The parser (cli_parse.ts, on cac), the help
// (cli_help.ts) and the shell completion (cli_completion.ts) are all
// generated from them, so that adding an action is one entry in its
// command's table:
//
//   { name: "approve", args: [NODE_ID], description: "Let a NEW node join", run: (ctx, [id]) => ... }
//
//   Program ─┬─ flags (every command takes them: --config, --timeout, ...)
//            └─ commands ─┬─ a command that runs:      args, flags, run
//                         └─ a command with actions ── actions: args, flags, run

/** A mistake in the command line: shown as one line, exit status 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

export interface FlagSpec {
  /** The long name, without dashes: "timeout" is --timeout. */
  name: string;
  /** A one-letter alias: "n" is -n. */
  short?: string;
  /** What the value is, for flags that take one: "ms" shows as --timeout <ms>. A flag without is a switch. */
  value?: string;
  /** One line. */
  description: string;
  /** What the flag is when not given, as help shows it. */
  default?: string;
  /**
   * Turns the value into what handlers get, or throws an Error that says
   * what is wrong with it ("not a positive integer"). Default: the text,
   * which must not be empty.
   */
  parse?: (raw: string) => unknown;
  /** The only values allowed, checked before `parse` and offered by completion ("--level <level>": debug, info, ...). */
  choices?: readonly string[];
  /** What the shell completes as the value. */
  complete?: "file" | "dir";
  /** May be given more than once: handlers get every value, in the order typed (an array). */
  repeatable?: boolean;
}

export interface ArgSpec {
  /** Shown as <name>. */
  name: string;
  optional?: boolean;
  /** Takes the rest of the arguments: at least one, unless optional. */
  variadic?: boolean;
  /** The only values allowed, which completion offers. */
  choices?: readonly string[];
  /** What the shell completes: files, directories, or the cluster's node IDs (from ctl node list --ids). */
  complete?: "file" | "dir" | "node";
}

/** Something that runs: a command without actions, or an action. */
export interface Invocable<C> {
  args?: readonly ArgSpec[];
  /** Flags of its own, besides the program's. */
  flags?: readonly FlagSpec[];
  /** `flags`: every flag given, by long name (the program's and this one's own). A number returned is the exit status (ctl cluster health's verdict). */
  run: (context: C, args: string[], flags: Readonly<Record<string, unknown>>) => Promise<void | number> | void | number;
}

export type ActionSpec<C> = { name: string; /** One line. */ description: string } & Invocable<C>;

export type CommandSpec<C> = { name: string; /** One line. */ description: string } & (
  { actions: readonly ActionSpec<C>[]; args?: never; flags?: never; run?: never } | (Invocable<C> & { actions?: never })
);

export interface Program<C> {
  /** "ctl" */
  name: string;
  description: string;
  /** Flags every command and action takes. */
  flags: readonly FlagSpec[];
  commands: readonly CommandSpec<C>[];
}

/** How an argument shows in usage lines: <node id>, [dir], <role...>, set|unset. */
export function argUsage(arg: ArgSpec): string {
  if (arg.choices && !arg.variadic && arg.choices.length <= 3) return arg.optional ? `[${arg.choices.join("|")}]` : arg.choices.join("|");
  const name = `${arg.name}${arg.variadic ? "..." : ""}`;
  return arg.optional ? `[${name}]` : `<${name}>`;
}

/** "--timeout <ms>", "-n, --lines <N>", "--json". */
export function flagUsage(flag: FlagSpec): string {
  return `${flag.short ? `-${flag.short}, ` : ""}--${flag.name}${flag.value ? ` <${flag.value}>` : ""}`;
}

/** The usage line of a command or an action: words ["ctl", "node", "approve"] and their arguments: "ctl node approve <node id>". */
export function usageLine(words: readonly string[], args: readonly ArgSpec[] = []): string {
  return [...words, ...args.map(argUsage)].join(" ");
}

/** The largest number a flag takes unless it says otherwise: the longest delay a timer takes, and more than any count needs. */
export const MAX_FLAG_INTEGER = 2 ** 31 - 1;

/** A flag's value parser: a whole number from 0 to `max`, in `unit`. */
export function wholeNumber(unit: string, max = MAX_FLAG_INTEGER): (raw: string) => number {
  return (raw) => {
    if (!/^\d+$/.test(raw)) throw new Error(`not a whole number (${unit})`);
    if (Number(raw) > max) throw new Error(`more than ${max} ${unit}`);
    return Number(raw);
  };
}

/** A flag's value parser: a whole number from 1 to `max`, in `unit`. */
export function positiveInteger(unit: string, max = MAX_FLAG_INTEGER): (raw: string) => number {
  return (raw) => {
    if (!/^\d+$/.test(raw) || Number(raw) < 1) throw new Error(`not a positive integer (${unit})`);
    if (Number(raw) > max) throw new Error(`more than ${max} ${unit}`);
    return Number(raw);
  };
}
