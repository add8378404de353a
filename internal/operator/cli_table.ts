// The tables a command line is made of: commands, their actions, and the
// arguments and flags of each. The parser (cli_parse.ts, on cac), the help
// (cli_help.ts) and the shell completion (cli_completion.ts) are all
// generated from them, so that adding an action is one entry in its
// command's table:
//
//   action({ name: "approve", args: [NODE_ID], description: "Let a NEW node join", run: (ctx, [id]) => ... })
//
//   Program ─┬─ flags (every command takes them: --config, --timeout, ...)
//            └─ commands ─┬─ a command that runs:      args, flags, run
//                         └─ a command with actions ── actions: args, flags, run
//
// The table is also the handlers' types: tableOf<C>().action and .command
// read an entry's own arguments and flags and hand its run what they make
// (FlagValues, ArgValues): a switch is a boolean, a flag with a default
// (written once, in its spec, and shown by the help) is its parsed value, a
// repeatable one an array, any other the value or undefined; an optional
// argument may be undefined, and a variadic one is the array of the rest.
// checkInvocation (cli_parse.ts) makes those values from the same specs.

/** A mistake in the command line: shown as one line, exit status 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

export interface FlagSpec<T = unknown> {
  /** The long name, without dashes: "timeout" is --timeout. */
  name: string;
  /** A one-letter alias: "n" is -n. */
  short?: string;
  /** What the value is, for flags that take one: "ms" shows as --timeout <ms>. A flag without is a switch. */
  value?: string;
  /** One line. */
  description: string;
  /** What handlers get when the flag is not given; help shows it. */
  default?: T;
  /** How help names a default that is no value of the flag ("$NODECORE_CONFIG or ~/.config/nodecore"); handlers then get undefined and work it out. */
  shownDefault?: string;
  /**
   * Turns the value into what handlers get, or throws an Error that says
   * what is wrong with it ("not a positive integer"). Default: the text,
   * which must not be empty.
   */
  parse?: (raw: string) => T;
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

/** Something that runs: a command without actions, or an action; its handler's types erased (tableOf makes them). */
export interface Invocable<C> {
  args?: readonly ArgSpec[];
  /** Flags of its own, besides the program's. */
  flags?: readonly FlagSpec[];
  /**
   * `args` and `flags` as checkInvocation makes them from the specs
   * (ArgValues, FlagValues; the program's flags included). A number
   * returned is the exit status (ctl cluster health's verdict). A method,
   * so that tableOf's typed handlers are entries of this erased type.
   */
  run(context: C, args: readonly unknown[], flags: Readonly<Record<string, unknown>>): Promise<void | number> | void | number;
}

export type ActionSpec<C> = { name: string; /** One line. */ description: string } & Invocable<C>;

export type CommandSpec<C> = { name: string; /** One line. */ description: string } & (
  { actions: readonly ActionSpec<C>[]; args?: never; flags?: never; run?: never } | (Invocable<C> & { actions?: never })
);

/** The value a flag's or argument's text becomes: what its parse returns, else one of its choices, else the text. */
type Parsed<S> = S extends { parse: (raw: string) => infer T } ? T : S extends { choices: readonly (infer C)[] } ? C : string;

/** What a handler gets for the flag `S` (see the file comment). */
export type FlagValue<S> = S extends { value: string } ? (S extends { repeatable: true } ? Parsed<S>[] : S extends { default: unknown } ? Parsed<S> : Parsed<S> | undefined) : boolean;

/** A handler's flags, by long name (of flags whose specs are not known here: unknown values). */
export type FlagValues<F extends readonly FlagSpec[]> = readonly FlagSpec[] extends F ? Readonly<Record<string, unknown>> : { readonly [S in F[number] as S["name"]]: FlagValue<S> };

/** What a handler gets for the argument `S`. */
export type ArgValue<S> = S extends { variadic: true } ? Parsed<S>[] : S extends { optional: true } ? Parsed<S> | undefined : Parsed<S>;

/** A handler's arguments, one per spec. */
export type ArgValues<A extends readonly ArgSpec[]> = { readonly [I in keyof A]: ArgValue<A[I]> };

/** An entry whose handler is typed by its own specs. */
export interface TypedInvocable<C, A extends readonly ArgSpec[], F extends readonly FlagSpec[]> {
  name: string;
  /** One line. */
  description: string;
  args?: A;
  flags?: F;
  run: (context: C, args: ArgValues<A>, flags: FlagValues<F>) => Promise<void | number> | void | number;
}

/**
 * The table's entry makers for handlers of context C: each reads its
 * entry's specs (const type parameters keep their names and kinds) to type
 * the entry's run, and returns the entry as the table holds it.
 */
export function tableOf<C>() {
  return {
    action: <const A extends readonly ArgSpec[] = [], const F extends readonly FlagSpec[] = []>(entry: TypedInvocable<C, A, F>): ActionSpec<C> => entry,
    command: <const A extends readonly ArgSpec[] = [], const F extends readonly FlagSpec[] = []>(entry: TypedInvocable<C, A, F>): CommandSpec<C> => entry,
  };
}

export interface Program<C, F extends readonly FlagSpec[] = readonly FlagSpec[]> {
  /** "ctl" */
  name: string;
  description: string;
  /** Flags every command and action takes. */
  flags: F;
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
