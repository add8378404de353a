import { afterEach, expect, test } from "bun:test";
import { untilOk } from "./component.ts";

const servers: { stop: (force?: boolean) => void }[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.stop(true);
});

// A loaded apiserver answers /readyz late. Asked again at 2 s (as until
// 2026-11-28), an answer that takes 2.5 s never arrived: each try was
// thrown away and the component was asked again, for ever.
test("a component that answers its readiness check late is seen ready, asked once", async () => {
  let asked = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch() {
      asked++;
      await Bun.sleep(2_500);
      return new Response("ok");
    },
  });
  servers.push(server);
  await untilOk(`http://127.0.0.1:${server.port}/readyz`, undefined, AbortSignal.timeout(8_000));
  expect(asked).toBe(1);
}, 10_000);

test("a component that is not listening yet is asked again until it answers", async () => {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
  const port = probe.port!;
  probe.stop(true);
  let asked = 0;
  setTimeout(() => {
    servers.push(
      Bun.serve({
        port,
        hostname: "127.0.0.1",
        fetch() {
          asked++;
          return new Response("ok");
        },
      }),
    );
  }, 1_500);
  await untilOk(`http://127.0.0.1:${port}/readyz`, undefined, AbortSignal.timeout(8_000));
  expect(asked).toBe(1);
}, 10_000);
