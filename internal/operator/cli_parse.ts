// Turning argv into an invocation of the tables (cli_table.ts). cac reads
// the words: flags anywhere, as --name value, --name=value, -x value or
// grouped (-fn 20), --no-name, "--". Around it, what cac leaves to its
// caller: which command and action the words name, whether each flag is
// theirs, each value checked, and every mistake a UsageError of one line
// that quotes what was typed and suggests a known word near it.
//
//   argv ──cac, the program's flags──▶ the command and action words
//          (an unknown flag before them; unknown command or action)
//        ──cac, and the action's flags──▶ Invocation {command, action, args, flags}
//          (unknown flags, values)
//        ──checkInvocation──▶ what to run, with what its handler gets
//          (missing command or action; missing, extra or unknown arguments;
//          defaults filled in, arguments one per spec: cli_table.ts)
//
// An action's own flags count from its word on. cac reads "1.5" as a
// number and "-1" as a flag; ctl quotes values as typed and takes "-1" as
// a value (for its parser to refuse). So each word that is not a flag goes
// to cac marked with its place in argv, and comes back unmarked.

import { cac } from "cac";
import { nearest } from "./nearest.ts";
import { UsageError, argUsage, flagUsage, usageLine, type ActionSpec, type CommandSpec, type FlagSpec, type FlagValues, type Invocable, type Program } from "./cli_table.ts";

export interface Invocation<C> {
  command?: CommandSpec<C>;
  action?: ActionSpec<C>;
  args: string[];
  /** Flag values by long name: true (false for --no-<name>) for a switch, the parsed value otherwise. */
  flags: Record<string, unknown>;
}

export function parseCommandLine<C>(program: Program<C>, argv: readonly string[]): Invocation<C> {
  const invocation: Invocation<C> = { args: [], flags: {} };
  const outer = readWords(program.flags, argv);
  const [first, second] = outer.words;
  if (first) {
    checkFlags(program, invocation, outer, first.at);
    invocation.command = named(program.commands, first.text);
    if (invocation.command.actions && second) {
      checkFlags(program, invocation, outer, second.at);
      invocation.action = named(invocation.command.actions, second.text, invocation.command.name);
    }
  }
  const inner = readWords(flagsInScope(program, invocation), argv);
  invocation.flags = checkFlags(program, invocation, inner, argv.length);
  invocation.args = inner.words.slice(invocation.action ? 2 : invocation.command ? 1 : 0).map((w) => w.text);
  return invocation;
}

/** What checkInvocation found: what to run, its words ("node", "approve"), and what its handler gets. */
export interface CheckedInvocation<C, F extends readonly FlagSpec[]> {
  target: Invocable<C>;
  words: string[];
  /** One value per argument spec (ArgValues): a variadic one is the array of the rest. */
  args: unknown[];
  /** Every flag in scope (FlagValues): as given, else its default, false for a switch, [] for a repeatable flag. */
  flags: FlagValues<F> & Readonly<Record<string, unknown>>;
}

/** What the invocation runs, once it names one and its arguments fit. */
export function checkInvocation<C, F extends readonly FlagSpec[]>(program: Program<C, F>, invocation: Invocation<C>): CheckedInvocation<C, F> {
  const { command, action } = invocation;
  if (!command) throw new UsageError(`missing command (commands: ${program.commands.map((c) => c.name).join(", ")})`);
  let target: Invocable<C>;
  let words: string[];
  if (command.actions) {
    if (!action) throw new UsageError(`missing action for ${command.name} (actions: ${command.actions.map((a) => a.name).join(", ")})`);
    target = action;
    words = [command.name, action.name];
  } else {
    target = command;
    words = [command.name];
  }
  const specs = target.args ?? [];
  const { args } = invocation;
  const usage = usageLine([program.name, ...words], specs);
  specs.forEach((spec, i) => {
    const given = spec.variadic ? args.slice(i) : args[i] === undefined ? [] : [args[i]!];
    if (given.length === 0 && !spec.optional) throw new UsageError(`missing ${argUsage(spec)}: usage: ${usage}`);
    for (const value of given) {
      if (spec.choices && !spec.choices.includes(value)) {
        const near = nearest(value, spec.choices);
        throw new UsageError(`unknown ${spec.name} '${value}' (${near ? `did you mean '${near}'? ` : ""}expected: ${spec.choices.join(", ")})`);
      }
    }
  });
  if (!specs.some((s) => s.variadic) && args.length > specs.length) {
    throw new UsageError(`unexpected argument '${args[specs.length]}': usage: ${usage}`);
  }
  const flags: Record<string, unknown> = {};
  for (const flag of flagsInScope(program, invocation)) {
    const given = invocation.flags[flag.name];
    flags[flag.name] = given !== undefined ? given : !flag.value ? false : flag.repeatable ? [] : flag.default;
  }
  return {
    target,
    words,
    args: specs.map((spec, i) => (spec.variadic ? args.slice(i) : args[i])),
    // The values were made from these very specs (checkValue, the defaults above): the one place they take the table's types.
    flags: flags as FlagValues<F> & Readonly<Record<string, unknown>>,
  };
}

/** The flags known at this point of the command line: the program's, then the command's or the action's. */
export function flagsInScope<C>(program: Program<C>, invocation: Pick<Invocation<C>, "command" | "action">): readonly FlagSpec[] {
  const own = invocation.action?.flags ?? (invocation.command?.actions ? [] : (invocation.command?.flags ?? []));
  return [...program.flags, ...own];
}

/** argv as cac reads it with `flags`: the words that are neither flags nor their values, what cac gave each flag, and the flags as typed. */
interface Words {
  words: { text: string; at: number }[];
  values: Map<FlagSpec, unknown>;
  flagWords: { at: number; word: string; typed: string; names: string[] }[];
}

const MARK = /^\0(\d+)\0/;

/** "-x", "--name", "--name=value", "-xy": not "-", "--" or "-1". */
const isFlag = (word: string) => /^-(-.|[^-\d])/.test(word);

function readWords(flags: readonly FlagSpec[], argv: readonly string[]): Words {
  const cli = cac();
  for (const flag of flags) cli.option(flagUsage(flag), flag.description);
  const end = argv.includes("--") ? argv.indexOf("--") : argv.length;
  const marked = argv.map((word, at) => {
    if (at >= end) return word;
    if (!isFlag(word)) return `\0${at}\0${word}`;
    // cac would nest --a.b under a (and throw if a has a value): ctl has no such flag, so none is seen as one.
    const [name, ...value] = word.split("=");
    return name!.replaceAll(".", "_") + (value.length ? `=\0${at}\0${value.join("=")}` : "");
  });
  const { args, options } = cli.parse(["", "", ...marked], { run: false });
  const unmark = (value: unknown): unknown => (typeof value === "string" ? value.replace(MARK, "") : Array.isArray(value) ? value.map(unmark) : value);
  const positional = args.map((word) => ({ text: word.replace(MARK, ""), at: Number(MARK.exec(word)?.[1]) }));
  const tail = (options["--"] as string[]).map((text, i) => ({ text, at: end + 1 + i }));
  // Not words: the value a switch was given (--json=yes), and a word like "-1" that no flag took as its value, an unknown flag.
  const stray = new Set(positional.filter((w) => !isFlag(argv[w.at]!) && /^-./.test(argv[w.at]!)).map((w) => w.at));
  return {
    words: [...positional.filter((w) => !/^-./.test(argv[w.at]!)), ...tail],
    values: new Map(flags.map((flag, i) => [flag, unmark(options[cli.globalCommand.options[i]!.name])])),
    // As cac names them: --no-json is json, -fn is f and n.
    flagWords: argv.slice(0, end).flatMap((word, at) => {
      if (stray.has(at)) return [{ at, word, typed: word, names: [word] }];
      if (!isFlag(word)) return [];
      const typed = word.split("=")[0]!;
      const names = typed.startsWith("--") ? [typed.slice(2).replace(/^no-/, "")] : [...typed.slice(1)];
      return [{ at, word, typed, names }];
    }),
  };
}

/** The flags typed before argv[`before`], checked in the order typed: each must be in scope, and its value fit. Returns their values by long name. */
function checkFlags<C>(program: Program<C>, invocation: Invocation<C>, read: Words, before: number): Record<string, unknown> {
  const known = flagsInScope(program, invocation);
  const values: Record<string, unknown> = {};
  for (const { at, word, typed, names } of read.flagWords) {
    if (at >= before) break;
    // Every letter of a group first: -n3 is no -n with a value, but an unknown -3.
    const given = names.map((name) => known.find((f) => f.name === name || f.short === name) ?? unknownFlag(typed, name, known, program, invocation));
    for (const flag of given) {
      // "=value" goes to the last of grouped letters (-fn=20 is -f -n 20).
      if (!flag.value && word.includes("=") && flag === given.at(-1)) throw new UsageError(`flag '${typed}' takes no value (got '${word}')`);
      values[flag.name] = checkValue(flag, typed, read.values.get(flag));
    }
  }
  return values;
}

/** What cac gave the flag, checked and parsed: the last value if given twice (but the first if as -n and as --lines: mri, cac's reader, merges aliases so). */
function checkValue(flag: FlagSpec, typed: string, given: unknown): unknown {
  if (flag.repeatable && flag.value) return (Array.isArray(given) ? given : [given]).map((one: unknown) => checkValue({ ...flag, repeatable: false }, typed, one));
  const raw = Array.isArray(given) ? given.at(-1) : given;
  if (!flag.value) return raw;
  if (typeof raw !== "string") throw new UsageError(`flag '${typed}' needs a value: ${typed} <${flag.value}>`);
  if (flag.choices && !flag.choices.includes(raw)) {
    const near = nearest(raw, flag.choices);
    throw new UsageError(`invalid value '${raw}' for ${typed} (${near ? `did you mean '${near}'? ` : ""}expected: ${flag.choices.join(", ")})`);
  }
  try {
    if (flag.parse) return flag.parse(raw);
    if (raw === "") throw new Error("empty");
    return raw;
  } catch (err) {
    throw new UsageError(`invalid value '${raw}' for ${typed}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** The command (or, with `command`, its action) named `word`; else what is near it, or what there is. */
function named<T extends { name: string }>(list: readonly T[], word: string, command?: string): T {
  const found = list.find((entry) => entry.name === word);
  if (found) return found;
  const names = list.map((entry) => entry.name);
  const near = nearest(word, names);
  const kind = command ? "action" : "command";
  throw new UsageError(`unknown ${kind} '${word}'${command ? ` for ${command}` : ""} (${near ? `did you mean '${command ? `${command} ` : ""}${near}'?` : `${kind}s: ${names.join(", ")}`})`);
}

/** Refuses a flag not in scope, as typed, suggesting the nearest known one or the help to read. */
function unknownFlag<C>(typed: string, name: string, known: readonly FlagSpec[], program: Program<C>, invocation: Invocation<C>): never {
  const near = nearest(
    name,
    known.map((f) => f.name),
  );
  const words = [invocation.command?.name, invocation.action?.name].filter((w) => w !== undefined);
  const help = `${[program.name, ...words].join(" ")} --help`;
  throw new UsageError(`unknown flag '${typed}' (${near ? `did you mean '--${near}'?` : `see '${help}'`})`);
}
