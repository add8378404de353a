// out/ctl: the owner's command line for a cluster. Wiring only: the
// commands are a table (commands.ts), parsed, explained and carried out by
// internal/operator. Whatever goes wrong prints one line, "ctl: <cause>",
// and exits 2 for a mistake in the command line, 1 for anything else.

import { writeSync } from "node:fs";
import { checkInvocation, configPaths, defaultConfigDir, explain, helpText, listNodes, loadCredentials, parseCommandLine, resolveNode } from "../../internal/operator/mod.ts";
import { VERSION } from "../../internal/version/mod.ts";
import { program, type Ctl } from "./commands.ts";

/** Progress goes to a terminal only, as one line that the next one (or the result) replaces. */
const terminal = process.stderr.isTTY === true;
function progress(line: string): void {
  if (terminal) process.stderr.write(`\r\x1b[2Kctl: ${line}`);
}
function clearProgress(): void {
  if (terminal) process.stderr.write("\r\x1b[2K");
}

async function main(argv: readonly string[]): Promise<number> {
  const invocation = parseCommandLine(program, argv);
  if (invocation.flags.help) {
    console.log(helpText(program, invocation));
    return 0;
  }
  if (invocation.flags.version) {
    console.log(VERSION);
    return 0;
  }
  const { target, args, flags } = checkInvocation(program, invocation);
  // -o json and --output json, as talosctl, kubectl and metroctl users type them.
  const json = flags.json || flags.output === "json";
  const paths = () => configPaths(flags.config ?? defaultConfigDir());
  const ctl: Ctl = {
    json,
    ownerKey: flags["owner-key"],
    paths,
    credentials: () => loadCredentials(paths(), flags["owner-key"]),
    settings: { timeoutMs: flags.timeout, progress },
    print: (value, human) => {
      clearProgress();
      console.log(json ? JSON.stringify(value, null, 2) : human);
    },
    printLine: (line) => {
      clearProgress();
      console.log(line);
    },
    progress,
    node: async (typed) => (NODE_ID_PATTERN.test(typed) ? typed : resolveNode(await listNodes(ctl.credentials(), ctl.settings), typed)),
    note: (line) => {
      clearProgress();
      process.stderr.write(`ctl: ${line}\n`);
    },
  };
  const status = await target.run(ctl, args, flags);
  return typeof status === "number" ? status : 0;
}

/** What a whole node ID looks like (the curator's NODE_ID_PATTERN): it needs no lookup. */
const NODE_ID_PATTERN = /^node-[0-9a-f]{16}$/;

function report(err: unknown): number {
  clearProgress();
  const { line, exitStatus } = explain(err);
  // Written at once: an uncaught error exits straight after.
  writeSync(2, `ctl: ${line}\n`);
  return exitStatus;
}

// An error thrown outside the command's own awaits (a library's callback)
// is reported the same way: one line, never a stack.
const crash = (err: unknown) => process.exit(report(err));
process.on("uncaughtException", crash);
process.on("unhandledRejection", crash);

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  process.exitCode = report(err);
}

// Exit now that the command is done. A connection attempt to a curator that
// is down (a SYN that nobody answers, after its VM powered off) outlives the
// closed client and would keep the process alive until the kernel gives up
// on it, two minutes later.
await new Promise<void>((resolve) => process.stdout.write("", () => resolve()));
await new Promise<void>((resolve) => process.stderr.write("", () => resolve()));
process.exit(process.exitCode ?? 0);
