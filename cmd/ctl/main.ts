// out/ctl: the operator's command line for a cluster.

import { cac } from "cac";
import { VERSION } from "../../internal/version/mod.ts";

const cli = cac("ctl");
cli.version(VERSION);
cli.help();
cli.command("version", "Print the version").action(() => console.log(VERSION));
cli.parse(process.argv, { run: false });
if (!cli.matchedCommand && !cli.options.help && !cli.options.version) {
  cli.outputHelp();
  process.exitCode = 2;
} else {
  await cli.runMatchedCommand();
}
