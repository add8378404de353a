// Turning argv into an invocation of the tables (cli_table.ts): which
// command, which action, its arguments and its flags, each checked. Every
// mistake is a UsageError of one line that quotes what was typed and, where
// a known word is near, suggests it.
//
//   argv ──parseCommandLine──▶ Invocation {command, action, args, flags}
//          (unknown command, action or flag; flag values)
//        ──checkInvocation──▶ what to run, with its arguments
//          (missing command or action; missing, extra or unknown arguments)
//
// Flags may come anywhere, as --name value, --name=value or -x value; a
// command's and an action's own flags count from the word that names them
// on. "--" ends the flags.

import { nearest } from "./nearest.ts";
import { UsageError, argUsage, usageLine, type ActionSpec, type CommandSpec, type FlagSpec, type Invocable, type Program } from "./cli_table.ts";

export interface Invocation<C> {
  command?: CommandSpec<C>;
  action?: ActionSpec<C>;
  args: string[];
  /** Flag values by long name: true for a switch, the parsed value otherwise. */
  flags: Record<string, unknown>;
}

export function parseCommandLine<C>(program: Program<C>, argv: readonly string[]): Invocation<C> {
  const invocation: Invocation<C> = { args: [], flags: {} };
  let flagsEnded = false;
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!;
    if (!flagsEnded && token === "--") {
      flagsEnded = true;
      continue;
    }
    if (!flagsEnded && token.startsWith("-") && token !== "-") {
      const eq = token.indexOf("=");
      const typed = eq === -1 ? token : token.slice(0, eq);
      const known = flagsInScope(program, invocation);
      const flag = known.find((f) => typed === `--${f.name}` || (f.short !== undefined && typed === `-${f.short}`));
      if (!flag) throw unknownFlag(typed, known, program, invocation);
      if (!flag.value) {
        if (eq !== -1) throw new UsageError(`flag '${typed}' takes no value (got '${token}')`);
        invocation.flags[flag.name] = true;
        continue;
      }
      let raw: string | undefined;
      if (eq !== -1) {
        raw = token.slice(eq + 1);
      } else {
        // The next word is the value, unless it is a flag itself ("-1" is a value, to be refused by its parser).
        const next = argv[i + 1];
        if (next !== undefined && (!next.startsWith("-") || next === "-" || /^-\d/.test(next))) {
          raw = next;
          i++;
        }
      }
      if (raw === undefined) throw new UsageError(`flag '${typed}' needs a value: ${typed} <${flag.value}>`);
      invocation.flags[flag.name] = parseValue(flag, typed, raw);
      continue;
    }
    if (!invocation.command) {
      invocation.command = commandNamed(program, token);
    } else if (invocation.command.actions && !invocation.action) {
      invocation.action = actionNamed(invocation.command, token);
    } else {
      invocation.args.push(token);
    }
  }
  return invocation;
}

/** What the invocation runs and its words ("node", "approve"), once it names one and its arguments fit. */
export function checkInvocation<C>(program: Program<C>, invocation: Invocation<C>): { target: Invocable<C>; words: string[] } {
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
  return { target, words };
}

/** The flags known at this point of the command line: the program's, then the command's or the action's. */
export function flagsInScope<C>(program: Program<C>, invocation: Pick<Invocation<C>, "command" | "action">): readonly FlagSpec[] {
  const own = invocation.action?.flags ?? (invocation.command?.actions ? [] : (invocation.command?.flags ?? []));
  return [...program.flags, ...own];
}

function commandNamed<C>(program: Program<C>, word: string): CommandSpec<C> {
  const command = program.commands.find((c) => c.name === word);
  if (command) return command;
  const names = program.commands.map((c) => c.name);
  const near = nearest(word, names);
  throw new UsageError(`unknown command '${word}' (${near ? `did you mean '${near}'?` : `commands: ${names.join(", ")}`})`);
}

function actionNamed<C>(command: CommandSpec<C> & { actions: readonly ActionSpec<C>[] }, word: string): ActionSpec<C> {
  const action = command.actions.find((a) => a.name === word);
  if (action) return action;
  const names = command.actions.map((a) => a.name);
  const near = nearest(word, names);
  throw new UsageError(`unknown action '${word}' for ${command.name} (${near ? `did you mean '${command.name} ${near}'?` : `actions: ${names.join(", ")}`})`);
}

function unknownFlag<C>(typed: string, known: readonly FlagSpec[], program: Program<C>, invocation: Invocation<C>): UsageError {
  const near = nearest(typed.replace(/^-+/, ""), known.map((f) => f.name));
  const words = [invocation.command?.name, invocation.action?.name].filter((w) => w !== undefined);
  const help = `${[program.name, ...words].join(" ")} --help`;
  return new UsageError(`unknown flag '${typed}' (${near ? `did you mean '--${near}'?` : `see '${help}'`})`);
}

function parseValue(flag: FlagSpec, typed: string, raw: string): unknown {
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
