// The command line from its tables: parsing, "did you mean", help and
// completion, on a small program that has what ctl's has (commands with and
// without actions, arguments with choices, variadic arguments) and action
// flags with short forms and values.

import { describe, expect, test } from "bun:test";
import { checkInvocation, parseCommandLine } from "./cli_parse.ts";
import { helpText } from "./cli_help.ts";
import { completionScript } from "./cli_completion.ts";
import { positiveInteger, tableOf, UsageError, type Program } from "./cli_table.ts";
import { editDistance, nearest } from "./nearest.ts";

const ran: string[] = [];
/** What the typed handler of "node logs" was given. */
const handed: { node: string; path: string | undefined; follow: boolean; lines: number; level: string | undefined; tags: string[] }[] = [];
const { action } = tableOf<null>();
const program: Program<null> = {
  name: "tool",
  description: "a tool",
  flags: [
    { name: "config", value: "dir", description: "Config dir", complete: "dir" },
    { name: "timeout", value: "ms", description: "Deadline", parse: positiveInteger("milliseconds") },
    { name: "json", description: "JSON" },
    { name: "help", short: "h", description: "Help" },
  ],
  commands: [
    { name: "version", description: "Print the version", run: () => void ran.push("version") },
    {
      name: "node",
      description: "Nodes",
      actions: [
        { name: "list", description: "List nodes", run: () => void ran.push("list") },
        action({
          name: "logs",
          args: [{ name: "node id" }, { name: "path", optional: true }],
          flags: [
            { name: "follow", short: "f", description: "Follow" },
            { name: "lines", short: "n", value: "N", description: "Backlog", default: 10, parse: positiveInteger("lines") },
            { name: "level", value: "level", description: "Minimum level", choices: ["debug", "info", "warn", "error"] },
            { name: "tag", value: "tag", description: "Tags", repeatable: true },
          ],
          description: "Show logs",
          // Typed by the entry: a string, a string or undefined, a boolean, a number, a level or undefined, an array.
          run: (_, [node, path], { follow, lines, level, tag }) => {
            ran.push("logs");
            handed.push({ node, path, follow, lines, level, tags: tag });
          },
        }),
        {
          name: "roles",
          args: [
            { name: "operation", choices: ["set", "unset"] },
            { name: "role", variadic: true, choices: ["a", "b"] },
          ],
          description: "Roles",
          run: () => {},
        },
      ],
    },
    { name: "write", args: [{ name: "file", complete: "file" }], description: "Write a file", run: () => {} },
  ],
};

function usageError(argv: string[]): string {
  try {
    checkInvocation(program, parseCommandLine(program, argv));
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return (err as Error).message;
  }
  throw new Error(`no usage error for ${argv.join(" ")}`);
}

describe("parsing", () => {
  test("flags go anywhere, as --name value, --name=value or -x value, and action flags count from the action on", () => {
    const invocation = parseCommandLine(program, ["--json", "node", "logs", "-n", "20", "node-1", "--follow", "root.x", "--timeout=500"]);
    expect(invocation.command?.name).toBe("node");
    expect(invocation.action?.name).toBe("logs");
    expect(invocation.args).toEqual(["node-1", "root.x"]);
    expect(invocation.flags).toEqual({ json: true, lines: 20, follow: true, timeout: 500 });
    expect(checkInvocation(program, invocation).words).toEqual(["node", "logs"]);
    expect(parseCommandLine(program, ["write", "--", "--odd-name"]).args).toEqual(["--odd-name"]);
  });

  test("unknown words are quoted as typed, with the nearest known one when one is near", () => {
    expect(usageError(["nod"])).toBe("unknown command 'nod' (did you mean 'node'?)");
    expect(usageError(["zzz"])).toBe("unknown command 'zzz' (commands: version, node, write)");
    expect(usageError(["node", "lsit"])).toBe("unknown action 'lsit' for node (did you mean 'node list'?)");
    expect(usageError(["node", "list", "--nodez"])).toBe("unknown flag '--nodez' (see 'tool node list --help')");
    expect(usageError(["node", "list", "--Json"])).toBe("unknown flag '--Json' (did you mean '--json'?)");
    // An action's flags are not the program's: -f before the action is unknown.
    expect(usageError(["node", "-f", "logs", "x"])).toBe("unknown flag '-f' (see 'tool node --help')");
  });

  test("values are checked, and so are the arguments' count and choices", () => {
    expect(usageError(["node", "logs", "x", "-n"])).toBe("flag '-n' needs a value: -n <N>");
    expect(usageError(["node", "logs", "x", "-n", "-3"])).toBe("invalid value '-3' for -n: not a positive integer (lines)");
    expect(usageError(["node", "logs", "x", "-f=1"])).toBe("flag '-f' takes no value (got '-f=1')");
    expect(usageError(["node", "logs", "x", "--level", "warning"])).toBe("invalid value 'warning' for --level (expected: debug, info, warn, error)");
    expect(usageError(["node", "logs", "x", "--level=inf"])).toBe("invalid value 'inf' for --level (did you mean 'info'? expected: debug, info, warn, error)");
    expect(usageError(["node", "logs"])).toBe("missing <node id>: usage: tool node logs <node id> [path]");
    expect(usageError(["node", "logs", "x", "y", "z"])).toBe("unexpected argument 'z': usage: tool node logs <node id> [path]");
    expect(usageError(["node", "roles", "sets", "a"])).toBe("unknown operation 'sets' (did you mean 'set'? expected: set, unset)");
    expect(usageError(["node", "roles", "set", "a", "c"])).toBe("unknown role 'c' (expected: a, b)");
    expect(usageError(["node"])).toBe("missing action for node (actions: list, logs, roles)");
    expect(usageError([])).toBe("missing command (commands: version, node, write)");
  });

  test("cac reads grouped letters, --no-<switch> and a repeated flag; values stay as typed, and an unknown flag is quoted as typed", () => {
    expect(parseCommandLine(program, ["node", "logs", "-fn", "20", "x"]).flags).toEqual({ follow: true, lines: 20 });
    expect(parseCommandLine(program, ["node", "logs", "x", "-fn=3"]).flags).toEqual({ follow: true, lines: 3 });
    expect(parseCommandLine(program, ["node", "list", "--no-json"]).flags).toEqual({ json: false });
    expect(parseCommandLine(program, ["node", "logs", "x", "-n", "5", "-n", "7"]).flags).toEqual({ lines: 7 });
    expect(usageError(["node", "logs", "x", "-n", "1e3"])).toBe("invalid value '1e3' for -n: not a positive integer (lines)");
    expect(usageError(["node", "logs", "x", "--lines=0x10"])).toBe("invalid value '0x10' for --lines: not a positive integer (lines)");
    expect(usageError(["--timeout", "node", "list"])).toBe("invalid value 'node' for --timeout: not a positive integer (milliseconds)");
    expect(usageError(["node", "logs", "x", "-fz"])).toBe("unknown flag '-fz' (see 'tool node logs --help')");
    expect(usageError(["node", "logs", "x", "-n3"])).toBe("unknown flag '-n3' (see 'tool node logs --help')");
    // "-2" is a value where a flag takes one, and an unknown flag elsewhere.
    expect(usageError(["node", "logs", "x", "-2"])).toBe("unknown flag '-2' (see 'tool node logs --help')");
    expect(usageError(["node", "logs", "x", "--json", "-2"])).toBe("unknown flag '-2' (see 'tool node logs --help')");
    expect(usageError(["node", "list", "--timeOut", "5"])).toBe("unknown flag '--timeOut' (did you mean '--timeout'?)");
    // cac would nest --config.x under --config; ctl has no such flag.
    expect(usageError(["--config", "d", "--config.x", "1", "node", "list"])).toBe("unknown flag '--config.x' (did you mean '--config'?)");
  });

  test("nearest allows about one wrong letter in three, a swap counting as one", () => {
    expect(editDistance("lsit", "list")).toBe(1);
    expect(nearest("aprove", ["approve", "list"])).toBe("approve");
    expect(nearest("take", ["takeownership", "ticket"])).toBe("takeownership");
    expect(nearest("x", ["node", "etcd"])).toBeUndefined();
  });
});

describe("what a handler gets", () => {
  /** Runs argv as ctl's main does, and returns what the logs handler was given. */
  async function run(argv: string[]) {
    handed.length = 0;
    const { target, args, flags } = checkInvocation(program, parseCommandLine(program, argv));
    await target.run(null, args, flags);
    return handed[0];
  }

  test("flags not given are their defaults: a switch false, a repeatable flag empty, a default as its spec says, else undefined", async () => {
    expect(await run(["node", "logs", "node-1"])).toEqual({ node: "node-1", path: undefined, follow: false, lines: 10, level: undefined, tags: [] });
    expect(await run(["node", "logs", "node-1", "root.x", "-fn", "3", "--level", "warn", "--tag", "a", "--tag", "b"])).toEqual({
      node: "node-1",
      path: "root.x",
      follow: true,
      lines: 3,
      level: "warn",
      tags: ["a", "b"],
    });
  });

  test("arguments are one per spec, a variadic one the array of the rest; the program's flags come along", () => {
    const roles = checkInvocation(program, parseCommandLine(program, ["node", "roles", "set", "a", "b", "--json"]));
    expect(roles.args).toEqual(["set", ["a", "b"]]);
    expect(roles.flags).toEqual({ config: undefined, timeout: undefined, json: true, help: false });
  });

  test("help shows a flag's default as the handler gets it", () => {
    expect(helpText(program, parseCommandLine(program, ["node", "logs", "-h"]))).toMatch(/-n, --lines <N> +Backlog \(default: 10\)$/m);
  });
});

describe("help and completion", () => {
  test("a command's help lists its actions, one line each, with their arguments", () => {
    const help = helpText(program, parseCommandLine(program, ["node", "--help"]));
    expect(help).toContain(["Actions:", "  list                       List nodes", "  logs <node id> [path]      Show logs", "  roles set|unset <role...>  Roles", ""].join("\n"));
    const logs = helpText(program, parseCommandLine(program, ["node", "logs", "-h"]));
    expect(logs).toContain("Usage: tool node logs <node id> [path] [flags]");
    expect(logs).toMatch(/-n, --lines <N> +Backlog/);
    expect(helpText(program, {})).toMatch(/^ {2}node <action> +Nodes: list, logs, roles$/m);
  });

  /** What bash offers after `words` (the last one is being typed). */
  async function bashOffers(words: string[]): Promise<string[]> {
    const script = `${completionScript(program, "bash")}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _tool_complete; printf '%s\\n' "\${COMPREPLY[@]}"`;
    const child = Bun.spawn(["bash", "-c", script], { stdout: "pipe", stderr: "pipe", cwd: import.meta.dir });
    const [out, err] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text()]);
    expect(err).toBe("");
    return out.split("\n").filter(Boolean).sort();
  }

  test("bash completes commands, actions, choices, flags in scope, and skips flag values", async () => {
    expect(await bashOffers(["tool", ""])).toEqual(["node", "version", "write"]);
    expect(await bashOffers(["tool", "--config", "/tmp", "no"])).toEqual(["node"]);
    expect(await bashOffers(["tool", "node", ""])).toEqual(["list", "logs", "roles"]);
    expect(await bashOffers(["tool", "node", "roles", ""])).toEqual(["set", "unset"]);
    expect(await bashOffers(["tool", "node", "roles", "set", "a", ""])).toEqual(["a", "b"]);
    expect(await bashOffers(["tool", "node", "logs", "--"])).toEqual(["--config", "--follow", "--help", "--json", "--level", "--lines", "--tag", "--timeout"]);
    expect(await bashOffers(["tool", "node", "logs", "x", "--level", "w"])).toEqual(["warn"]);
    expect(await bashOffers(["tool", "node", "list", "--"])).toEqual(["--config", "--help", "--json", "--timeout"]);
    expect(await bashOffers(["tool", "write", "cli_t"])).toEqual(["cli_table.ts"]);
  });

  test("the zsh script is generated from the same table", () => {
    const script = completionScript(program, "zsh");
    expect(script).toStartWith("#compdef tool\n");
    expect(script).toContain("'node:Nodes'");
    expect(script).toContain("(logs)");
    expect(script).toContain("compadd -- 'set' 'unset'");
  });
});
