// Test driver for masquerade.test.ts, run in one of its network namespaces:
//   apply <prefix> | remove    (the node)     sets or removes the masquerade table
//   serve <address> <port>     (the outside)  answers each connection with the address it came from
//   dial <address> <port>      (the pod)      prints that answer, or "no answer"

import { applyMasquerade, removeMasquerade } from "./masquerade.ts";

const [mode, a, b] = process.argv.slice(2);
if (mode === "apply") await applyMasquerade(a!, "nodecore-wg");
else if (mode === "remove") await removeMasquerade();
else if (mode === "serve") {
  Bun.listen({
    hostname: a!,
    port: Number(b),
    socket: {
      open(socket) {
        socket.end(`${socket.remoteAddress}\n`);
      },
      data() {},
    },
  });
  process.stdout.write("listening\n");
} else if (mode === "dial") {
  const answer = await new Promise<string>((resolve) => {
    const timer = setTimeout(() => resolve("no answer"), 3_000);
    let said = "";
    Bun.connect({
      hostname: a!,
      port: Number(b),
      socket: {
        data(_socket, chunk) {
          said += chunk.toString();
        },
        close() {
          clearTimeout(timer);
          resolve(said.trim() || "closed without a word");
        },
        connectError() {},
      },
    }).catch(() => {});
  });
  process.stdout.write(`${answer}\n`);
  process.exit(0);
} else throw new Error(`unknown mode ${mode}`);
