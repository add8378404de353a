import { afterEach, describe, expect, test } from "bun:test";
import { captureLogger } from "../log/mod.ts";
import { eventually } from "../testing/mod.ts";
import { failingRunnables, failingSummary, RestartRequest, supervise, untilCancelled as waitCancelled, type RunContext, type Runnable, type Supervisor, type SupervisorOptions } from "./mod.ts";

/** Fast restarts for tests; no jitter so intervals can be checked exactly. */
const TEST_BACKOFF = { initialMs: 20, multiplier: 1.5, maxMs: 200, jitter: 0 };

const running: Supervisor[] = [];
afterEach(async () => {
  // Cancel every tree and wait for every runnable, so no test leaks work.
  await Promise.all(running.splice(0).map((s) => s.stop()));
});

function start(runnable: Runnable, options: SupervisorOptions = {}) {
  const { logger, entries } = captureLogger("root");
  const supervisor = supervise(runnable, { logger, backoff: TEST_BACKOFF, ...options });
  running.push(supervisor);
  return { supervisor, entries };
}

function node(supervisor: Supervisor, path: string) {
  const found = supervisor.dump().find((d) => d.path === path);
  if (!found) throw new Error(`no runnable at ${path}; tree: ${supervisor.formatDump()}`);
  return found;
}

const untilCancelled = (ctx: RunContext) => waitCancelled(ctx.signal);

describe("supervisor", () => {
  test("restarts a runnable that throws", async () => {
    let starts = 0;
    const { supervisor, entries } = start(async (ctx) => {
      ctx.run("flaky", async (c) => {
        starts++;
        if (starts < 3) throw new Error(`failure ${starts}`);
        c.signalHealthy();
        await untilCancelled(c);
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(node(supervisor, "root.flaky").state).toBe("healthy"));
    expect(starts).toBe(3);
    const flaky = node(supervisor, "root.flaky");
    expect(flaky.restarts).toBe(2);
    expect(flaky.lastError).toBe("failure 2");
    expect(entries.some((e) => e.component === "root.flaky" && e.message === "runnable died" && e.fields.error === "failure 1")).toBe(true);
  });

  test("restarts a runnable that returns before being cancelled", async () => {
    let starts = 0;
    const { supervisor } = start(async (ctx) => {
      ctx.run("quitter", async (c) => {
        starts++;
        if (starts < 2) return;
        await untilCancelled(c);
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(starts).toBe(2));
    expect(node(supervisor, "root.quitter").lastError).toContain("returned before being cancelled");
  });

  test("backoff grows with every death and resets once the runnable is healthy", async () => {
    let starts = 0;
    const { supervisor, entries } = start(async (ctx) => {
      ctx.run("crasher", async (c) => {
        starts++;
        if (starts <= 4) throw new Error("crash");
        c.signalHealthy();
        await untilCancelled(c);
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(node(supervisor, "root.crasher").state).toBe("healthy"));
    // Delays before each restart: the initial interval, then ×1.5 per death.
    const delays = entries.filter((e) => e.component === "root.crasher" && e.message === "restarting").map((e) => e.fields.delayMs);
    expect(delays).toEqual([20, 30, 45, 68]);
    expect(node(supervisor, "root.crasher").backoffMs).toBe(20);
  });

  test("the backoff interval is capped", async () => {
    const { Backoff } = await import("./mod.ts");
    const backoff = new Backoff({ initialMs: 500, multiplier: 1.5, maxMs: 60_000, jitter: 0 });
    const delays = Array.from({ length: 20 }, () => backoff.next());
    expect(delays.slice(0, 3)).toEqual([500, 750, 1125]);
    expect(Math.max(...delays)).toBe(60_000);
    const jittery = new Backoff({ initialMs: 1000, multiplier: 2, maxMs: 10_000, jitter: 0.5 }, () => 0);
    expect(jittery.next()).toBe(500);
  });

  test("a death restarts the group's siblings but not other children", async () => {
    const starts = { a: 0, b: 0, other: 0 };
    let failA = true;
    const { supervisor } = start(async (ctx) => {
      ctx.runGroup({
        a: async (c) => {
          starts.a++;
          await Bun.sleep(5);
          if (failA) {
            failA = false;
            throw new Error("a failed");
          }
          await untilCancelled(c);
        },
        b: async (c) => {
          starts.b++;
          await untilCancelled(c);
        },
      });
      ctx.run("other", async (c) => {
        starts.other++;
        await untilCancelled(c);
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(starts).toEqual({ a: 2, b: 2, other: 1 }));
    expect(node(supervisor, "root.b").restarts).toBe(1);
    expect(node(supervisor, "root.other").restarts).toBe(0);
  });

  test("a death cancels the dead runnable's children, and never kills its parent", async () => {
    let parentStarts = 0;
    let middleStarts = 0;
    const childSignals: AbortSignal[] = [];
    const { supervisor } = start(async (ctx) => {
      parentStarts++;
      ctx.run("middle", async (c) => {
        middleStarts++;
        c.run("leaf", async (leaf) => {
          childSignals.push(leaf.signal);
          await untilCancelled(leaf);
        });
        await Bun.sleep(10);
        if (middleStarts === 1) throw new Error("middle failed");
        await untilCancelled(c);
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(childSignals.length).toBe(2));
    expect(childSignals[0]!.aborted).toBe(true);
    expect(childSignals[1]!.aborted).toBe(false);
    expect(parentStarts).toBe(1);
    expect(node(supervisor, "root").restarts).toBe(0);
    expect(node(supervisor, "root.middle.leaf").state).toBe("starting");
  });

  test("a runnable that signalled done is not restarted and its children keep running", async () => {
    let starts = 0;
    const { supervisor } = start(async (ctx) => {
      ctx.run("oneshot", async (c) => {
        starts++;
        c.run("worker", async (w) => {
          w.signalHealthy();
          await untilCancelled(w);
        });
        c.signalHealthy();
        c.signalDone();
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(node(supervisor, "root.oneshot").state).toBe("done"));
    await eventually(() => expect(node(supervisor, "root.oneshot.worker").state).toBe("healthy"));
    expect(starts).toBe(1);
    expect(node(supervisor, "root.oneshot").restarts).toBe(0);
  });

  test("the tree dump lists every runnable with state, restarts, last error and time in state", async () => {
    let fail = true;
    const { supervisor } = start(async (ctx) => {
      ctx.signalHealthy();
      ctx.run("roleserve", async (c) => {
        c.run("controlplane", async (cp) => {
          cp.signalHealthy();
          await untilCancelled(cp);
        });
        if (fail) {
          fail = false;
          throw new Error("no membership yet");
        }
        c.signalHealthy();
        await untilCancelled(c);
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(node(supervisor, "root.roleserve").state).toBe("healthy"));
    await eventually(() => expect(node(supervisor, "root.roleserve.controlplane").state).toBe("healthy"));
    const dump = supervisor.dump();
    expect(dump.map((d) => d.path)).toEqual(["root", "root.roleserve", "root.roleserve.controlplane"]);
    expect(dump[1]).toMatchObject({ state: "healthy", restarts: 1, lastError: "no membership yet" });
    expect(dump[2]).toMatchObject({ state: "healthy", restarts: 0 });
    expect(dump[2]!.lastError).toBeUndefined();
    for (const d of dump) expect(d.sinceMs).toBeGreaterThanOrEqual(0);
    expect(supervisor.formatDump()).toContain("root.roleserve.controlplane");
    expect(supervisor.formatDump()).toContain("last error: no membership yet");
  });

  test("a runnable that ignores cancellation is reported stuck, not awaited forever", async () => {
    let release!: () => void;
    const ignored = new Promise<void>((resolve) => (release = resolve));
    const { supervisor, entries } = start(
      async (ctx) => {
        ctx.run("stubborn", async () => {
          await ignored;
        });
        await untilCancelled(ctx);
      },
      { stopGraceMs: 50 },
    );
    await eventually(() => node(supervisor, "root.stubborn"));
    await supervisor.stop();
    expect(node(supervisor, "root.stubborn").state).toBe("stuck");
    expect(entries.some((e) => e.component === "root.stubborn" && e.message.includes("ignored cancellation"))).toBe(true);
    release();
    await eventually(() => expect(entries.some((e) => e.message === "stuck runnable returned at last")).toBe(true));
  });

  test("a restart request from a healthy runnable restarts it without backoff growth", async () => {
    let starts = 0;
    const { supervisor, entries } = start(async (ctx) => {
      ctx.run("worker", async (c) => {
        starts++;
        c.signalHealthy();
        if (starts < 3) throw new RestartRequest("roles changed");
        await untilCancelled(c);
      });
      await untilCancelled(ctx);
    });
    await eventually(() => expect(starts).toBe(3));
    expect(node(supervisor, "root.worker").backoffMs).toBe(TEST_BACKOFF.initialMs);
    const requests = entries.filter((e) => e.message === "restart requested");
    expect(requests.length).toBe(2);
    expect(requests[0]!.level).toBe("info");
    // Planned, not failed: no last error to show in ctl node services.
    expect(node(supervisor, "root.worker").lastError).toBeUndefined();
  });

  test("starting two children with one name is a death with a clear message", async () => {
    const { supervisor } = start(async (ctx) => {
      ctx.run("dup", (c) => untilCancelled(c));
      ctx.run("dup", (c) => untilCancelled(c));
      await untilCancelled(ctx);
    });
    await eventually(() => expect(node(supervisor, "root").lastError).toContain("a child named dup already exists"));
  });

  test("stop cancels every runnable and waits for all of them", async () => {
    const stopped: string[] = [];
    const worker = (name: string) => async (c: RunContext) => {
      await untilCancelled(c);
      await Bun.sleep(5);
      stopped.push(name);
    };
    const { supervisor } = start(async (ctx) => {
      ctx.run("a", worker("a"));
      ctx.run("b", async (c) => {
        c.run("c", worker("c"));
        await worker("b")(c);
      });
      await worker("root")(ctx);
    });
    await eventually(() => node(supervisor, "root.b.c"));
    await supervisor.stop();
    expect(stopped.sort()).toEqual(["a", "b", "c", "root"]);
    expect(supervisor.dump().every((d) => d.state === "stopped")).toBe(true);
  });
});

describe("failing runnables (the node's supervision line)", () => {
  test("a runnable that keeps dying is failing, with its restarts and last error; planned restarts and healthy ones are not", async () => {
    let plannedStarts = 0;
    const { supervisor } = start(async (ctx) => {
      ctx.run("crashloop", async () => {
        throw new Error("etcd exited with code 1");
      });
      ctx.run("planned", async (c) => {
        plannedStarts++;
        c.signalHealthy();
        if (plannedStarts < 3) throw new RestartRequest("got the consensus role");
        await untilCancelled(c);
      });
      ctx.run("fine", async (c) => {
        c.signalHealthy();
        await untilCancelled(c);
      });
      ctx.signalHealthy();
      await untilCancelled(ctx);
    });
    await eventually(() => expect(node(supervisor, "root.crashloop").restarts).toBeGreaterThanOrEqual(3));
    await eventually(() => expect(plannedStarts).toBe(3));
    const failing = failingRunnables(supervisor.dump(), TEST_BACKOFF.initialMs);
    expect(failing.map((d) => d.path)).toEqual(["root.crashloop"]);
    expect(failingSummary(failing)).toMatch(/^root\.crashloop keeps failing \(\d+ restarts; last: etcd exited with code 1\)$/);
  });

  test("the summary names three and counts the rest", () => {
    const dump = ["a", "b", "c", "d", "e"].map((n) => ({ path: `root.${n}`, state: "dead" as const, restarts: 2, sinceMs: 0, backoffMs: 1_000 }));
    expect(failingSummary(failingRunnables(dump))).toBe("root.a keeps failing (2 restarts); root.b keeps failing (2 restarts); root.c keeps failing (2 restarts); and 2 more");
  });
});
