// Help text, generated from the tables (cli_table.ts): the program's
// commands, a command's actions, an action's arguments and flags. Each
// entry's description is its one line.

import { flagsInScope, type Invocation } from "./cli_parse.ts";
import { argUsage, flagUsage, usageLine, type FlagSpec, type Program } from "./cli_table.ts";

/** The help for what the invocation names so far: the program, a command, or an action. */
export function helpText<C>(program: Program<C>, invocation: Pick<Invocation<C>, "command" | "action">): string {
  const { command, action } = invocation;
  const flags = section("Flags", flagRows(flagsInScope(program, invocation)));
  if (!command) {
    const commands = program.commands.map((c) => [
      usageLine([c.name], c.actions ? [{ name: "action" }] : (c.args ?? [])),
      c.actions ? `${c.description}: ${c.actions.map((a) => a.name).join(", ")}` : c.description,
    ]);
    return [
      `${program.name}: ${program.description}`,
      `Usage: ${program.name} <command> [<action>] [<arguments>] [flags]`,
      section("Commands", commands),
      flags,
      `Run '${program.name} <command> --help' for a command's actions and arguments.`,
    ].join("\n\n");
  }
  if (command.actions && !action) {
    const actions = command.actions.map((a) => [[a.name, ...(a.args ?? []).map(argUsage)].join(" "), a.description]);
    return [
      `${program.name} ${command.name}: ${command.description}`,
      `Usage: ${program.name} ${command.name} <action> [<arguments>] [flags]`,
      section("Actions", actions),
      flags,
      `Run '${program.name} ${command.name} <action> --help' for an action's arguments.`,
    ].join("\n\n");
  }
  const target = action ?? command;
  const words = action ? [command.name, action.name] : [command.name];
  const args = target.args ?? [];
  // Choices that the usage line does not show (<role...>) are listed.
  const choices = args.filter((a) => a.choices && argUsage(a) !== a.choices.join("|")).map((a) => [argUsage(a), `${a.variadic ? "one or more" : "one"} of ${a.choices!.join(", ")}`]);
  return [
    `${[program.name, ...words].join(" ")}: ${target.description}`,
    `Usage: ${usageLine([program.name, ...words], args)} [flags]`,
    ...(choices.length ? [section("Arguments", choices)] : []),
    flags,
  ].join("\n\n");
}

function flagRows(flags: readonly FlagSpec[]): string[][] {
  return flags.map((f) => {
    const notes = [
      ...(f.choices ? [`one of ${f.choices.join(", ")}`] : []),
      ...(f.shownDefault !== undefined || f.default !== undefined ? [`default: ${f.shownDefault ?? String(f.default)}`] : []),
      ...(f.repeatable ? ["may be given more than once"] : []),
    ];
    return [flagUsage(f), notes.length ? `${f.description} (${notes.join("; ")})` : f.description];
  });
}

/** A titled two-column table. */
function section(title: string, rows: readonly (readonly string[])[]): string {
  const width = Math.max(...rows.map((r) => r[0]!.length));
  return `${title}:\n${rows.map(([left, right]) => `  ${left!.padEnd(width)}  ${right}`.trimEnd()).join("\n")}`;
}
