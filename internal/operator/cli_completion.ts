// Shell completion scripts, generated from the tables (cli_table.ts):
// commands, actions, arguments with fixed choices or files, and flags,
// with the values of flags that take one skipped.
//
//   ctl completion bash > /etc/bash_completion.d/ctl     (or: source <(ctl completion bash))
//   ctl completion zsh > "${fpath[1]}/_ctl"              (or: source <(ctl completion zsh))
//
// Both scripts walk the words typed so far the same way: flags (and the
// value after a flag that takes one) are skipped, the rest are the
// command, the action, and the arguments, which pick what to offer.

import type { ArgSpec, FlagSpec, Invocable, Program } from "./cli_table.ts";
import { flagsInScope } from "./cli_parse.ts";

export const SHELLS = ["bash", "zsh"] as const;
export type Shell = (typeof SHELLS)[number];

export function completionScript<C>(program: Program<C>, shell: Shell): string {
  switch (shell) {
    case "bash":
      return bashScript(program);
    case "zsh":
      return zshScript(program);
    default: {
      const never: never = shell;
      throw new Error(`no completion for ${String(never)}`);
    }
  }
}

/** How each shell offers words, files or directories, or nothing. */
interface Dialect {
  words(words: readonly string[]): string;
  described(kind: string, entries: readonly { name: string; description: string }[]): string;
  files(kind: "file" | "dir" | "node" | undefined): string;
}

/** The shell's words for the cluster's node IDs and names: ctl itself lists them. */
const NODE_WORDS = "$(ctl node list --ids 2>/dev/null)";

const bash: Dialect = {
  words: (words) => `COMPREPLY=($(compgen -W ${quote(words.join(" "))} -- "$cur"))`,
  described: (_, entries) => bash.words(entries.map((e) => e.name)),
  files: (kind) =>
    kind === "dir" ? `COMPREPLY=($(compgen -d -- "$cur"))` : kind === "file" ? `COMPREPLY=($(compgen -f -- "$cur"))` : kind === "node" ? `COMPREPLY=($(compgen -W "${NODE_WORDS}" -- "$cur"))` : "COMPREPLY=()",
};

const zsh: Dialect = {
  words: (words) => `compadd -- ${words.map(quote).join(" ")}`,
  described: (kind, entries) => `entries=(${entries.map((e) => quote(`${e.name.replaceAll(":", "\\:")}:${e.description}`)).join(" ")}); _describe ${quote(kind)} entries`,
  files: (kind) => (kind === "dir" ? "_files -/" : kind === "file" ? "_files" : kind === "node" ? `compadd -- ${NODE_WORDS}` : ":"),
};

function quote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

function flagWords(flags: readonly FlagSpec[]): string[] {
  return flags.flatMap((f) => [`--${f.name}`, ...(f.short ? [`-${f.short}`] : [])]);
}

/** Every flag that takes a value, wherever it is defined: its value is no positional word. */
function valueFlags<C>(program: Program<C>): FlagSpec[] {
  const all = [...program.flags, ...program.commands.flatMap((c) => [...(c.flags ?? []), ...(c.actions ?? []).flatMap((a) => a.flags ?? [])])];
  const seen = new Set<string>();
  return all.filter((f) => f.value && !seen.has(f.name) && seen.add(f.name));
}

/** The `case` arms (pattern, body) that pick what to offer for an argument, by its index $n among the arguments. */
function argArms(dialect: Dialect, args: readonly ArgSpec[]): [string, string][] {
  const offer = (arg: ArgSpec) => (arg.choices ? dialect.words(arg.choices) : dialect.files(arg.complete));
  const arms: [string, string][] = args.map((arg, i) => [String(i), offer(arg)]);
  const last = args.at(-1);
  arms.push(["*", last?.variadic ? offer(last) : dialect.files(undefined)]);
  return arms;
}

/**
 * The `case` arms, one per command, that pick what to offer after the
 * command: its actions, then the action's (or the command's own)
 * arguments. `count` and `actionWord` are the shell's words for the number
 * of positional words and the second of them.
 */
function commandArms<C>(dialect: Dialect, program: Program<C>, count: string, actionWord: string): [string, string][] {
  const argumentCase = (target: Invocable<C>, before: number, indent: string): string => {
    if (!target.args?.length) return indent + dialect.files(undefined);
    const lines = [`n=$((${count} - ${before}))`, "case $n in", ...argArms(dialect, target.args).map(([pattern, body]) => `  (${pattern}) ${body} ;;`), "esac"];
    return lines.map((line) => indent + line).join("\n");
  };
  return program.commands.map((command) => {
    if (!command.actions) return [command.name, `\n${argumentCase(command, 1, "      ")}\n      `];
    const actions = dialect.described("action", command.actions);
    const perAction = command.actions.map((a) => `        (${a.name})\n${argumentCase(a, 2, "          ")}\n          ;;`);
    return [command.name, `\n      if ((${count} == 1)); then ${actions}; return; fi\n      case ${actionWord} in\n${perAction.join("\n")}\n      esac\n      `];
  });
}

/** The `case` arms that offer flags: those of the command or action typed so far. */
function flagArms<C>(dialect: Dialect, program: Program<C>): [string, string][] {
  const arms: [string, string][] = [];
  for (const command of program.commands) {
    if (command.actions) {
      for (const action of command.actions) {
        if (action.flags?.length) arms.push([`${command.name}/${action.name}`, dialect.words(flagWords(flagsInScope(program, { command, action })))]);
      }
    } else if (command.flags?.length) {
      arms.push([`${command.name}/*`, dialect.words(flagWords(flagsInScope(program, { command })))]);
    }
  }
  arms.push(["*", dialect.words(flagWords(program.flags))]);
  return arms;
}

function valueArms<C>(dialect: Dialect, program: Program<C>): [string, string][] {
  return valueFlags(program).map((f) => [flagWords([f]).join("|"), `${f.choices ? dialect.words(f.choices) : dialect.files(f.complete)}; return`]);
}

function bashScript<C>(program: Program<C>): string {
  const fn = `_${program.name.replace(/\W/g, "_")}_complete`;
  const arms = (list: [string, string][], indent: string) => list.map(([pattern, body]) => `${indent}${pattern}) ${body} ;;`).join("\n");
  const skip = valueFlags(program).flatMap((f) => flagWords([f])).join("|") || "--";
  return `# bash completion for ${program.name}, generated by '${program.name} completion bash'.
# Load it with: source <(${program.name} completion bash)
${fn}() {
  COMPREPLY=()
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]}
  local -a pos=()
  local i w n skip=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=\${COMP_WORDS[i]}
    if ((skip)); then skip=0; continue; fi
    case $w in
      ${skip}) skip=1 ;;
      -*) ;;
      *) pos+=("$w") ;;
    esac
  done
  case $prev in
${arms(valueArms(bash, program), "    ")}
  esac
  if [[ $cur == -* ]]; then
    case "\${pos[0]-}/\${pos[1]-}" in
${arms(flagArms(bash, program), "      ")}
    esac
    return
  fi
  if ((\${#pos[@]} == 0)); then ${bash.words(program.commands.map((c) => c.name))}; return; fi
  case \${pos[0]} in
${commandArms(bash, program, "${#pos[@]}", "${pos[1]}").map(([p, body]) => `    ${p})${body};;`).join("\n")}
  esac
}
complete -F ${fn} ${program.name}
`;
}

function zshScript<C>(program: Program<C>): string {
  const fn = `_${program.name.replace(/\W/g, "_")}`;
  const arms = (list: [string, string][], indent: string) => list.map(([pattern, body]) => `${indent}(${pattern}) ${body} ;;`).join("\n");
  const skip = valueFlags(program).flatMap((f) => flagWords([f])).join("|") || "--";
  const commands = program.commands.map((c) => ({ name: c.name, description: c.description }));
  return `#compdef ${program.name}
# zsh completion for ${program.name}, generated by '${program.name} completion zsh'.
# Load it with: source <(${program.name} completion zsh), or save it as ${fn} in a directory of $fpath.
${fn}() {
  local cur=\${words[CURRENT]} prev=\${words[CURRENT-1]}
  local -a pos entries
  local i w n skip=0
  for ((i = 2; i < CURRENT; i++)); do
    w=\${words[i]}
    if ((skip)); then skip=0; continue; fi
    case $w in
      (${skip}) skip=1 ;;
      (-*) ;;
      (*) pos+=("$w") ;;
    esac
  done
  case $prev in
${arms(valueArms(zsh, program), "    ")}
  esac
  if [[ $cur == -* ]]; then
    case "\${pos[1]-}/\${pos[2]-}" in
${arms(flagArms(zsh, program), "      ")}
    esac
    return
  fi
  if ((\${#pos} == 0)); then ${zsh.described("command", commands)}; return; fi
  case \${pos[1]} in
${commandArms(zsh, program, "${#pos}", "${pos[2]}").map(([p, body]) => `    (${p})${body};;`).join("\n")}
  esac
}
if [[ \${funcstack[1]-} == ${fn} ]]; then ${fn} "$@"; else compdef ${fn} ${program.name}; fi
`;
}
