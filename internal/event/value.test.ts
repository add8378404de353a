import { describe, expect, test } from "bun:test";
import { Value, WatcherClosedError } from "./mod.ts";
import { eventually } from "../testing/mod.ts";

describe("Value", () => {
  test("get waits for the first value and then returns the latest", async () => {
    const value = new Value<number>();
    const pending = value.get();
    value.set(1);
    expect(await pending).toBe(1);
    value.set(2);
    expect(await value.get()).toBe(2);
    expect(value.peek()).toBe(2);
  });

  test("a watcher sees updates in order and never the same one twice", async () => {
    const value = new Value<string>();
    using watcher = value.watch();
    value.set("a");
    expect(await watcher.get()).toBe("a");
    const next = watcher.get();
    let resolved = false;
    next.then(() => (resolved = true));
    await Promise.resolve();
    expect(resolved).toBe(false);
    value.set("b");
    expect(await next).toBe("b");
  });

  test("intermediate updates collapse into the latest for a slow watcher", async () => {
    const value = new Value<number>();
    using watcher = value.watch();
    value.set(1);
    value.set(2);
    value.set(3);
    expect(await watcher.get()).toBe(3);
  });

  test("each watcher follows the value independently", async () => {
    const value = new Value<number>();
    using a = value.watch();
    using b = value.watch();
    value.set(1);
    expect(await a.get()).toBe(1);
    value.set(2);
    expect(await a.get()).toBe(2);
    expect(await b.get()).toBe(2);
  });

  test("getWhen and waitFor return the first value matching the predicate", async () => {
    const value = new Value<number>();
    const even = value.waitFor((n) => n % 2 === 0);
    value.set(1);
    value.set(3);
    await Promise.resolve();
    value.set(4);
    expect(await even).toBe(4);
    using watcher = value.watch();
    const big = watcher.getWhen((n) => n > 10);
    value.set(5);
    await Bun.sleep(0);
    value.set(11);
    expect(await big).toBe(11);
  });

  test("an aborted get rejects with the signal's reason", async () => {
    const value = new Value<number>();
    const controller = new AbortController();
    const pending = value.get({ signal: controller.signal });
    controller.abort(new Error("stop waiting"));
    await expect(pending).rejects.toThrow("stop waiting");
    // The value still works for others after an abandoned wait.
    value.set(7);
    expect(await value.get()).toBe(7);
  });

  test("a get with an already-aborted signal rejects at once", async () => {
    const value = new Value<number>();
    await expect(value.get({ signal: AbortSignal.abort(new Error("already")) })).rejects.toThrow("already");
  });

  test("closing a watcher rejects its pending get and ends its iteration", async () => {
    const value = new Value<number>();
    const watcher = value.watch();
    const pending = watcher.get();
    watcher.close();
    await expect(pending).rejects.toBeInstanceOf(WatcherClosedError);

    const iterated: number[] = [];
    const second = value.watch();
    const loop = (async () => {
      for await (const n of second) {
        iterated.push(n);
        if (n === 2) second.close();
      }
    })();
    value.set(1);
    await Bun.sleep(0);
    value.set(2);
    await loop;
    expect(iterated).toEqual([1, 2]);
  });

  test("a watcher does not leak waiters after aborted gets", async () => {
    const value = new Value<number>();
    for (let i = 0; i < 100; i++) {
      const controller = new AbortController();
      const pending = value.get({ signal: controller.signal });
      controller.abort();
      await pending.catch(() => {});
    }
    expect((value as unknown as { waiters: Set<unknown> }).waiters.size).toBe(0);
  });
});

describe("followValues", () => {
  test("yields the current value of each, then every change of either, in order", async () => {
    const { followValues } = await import("./mod.ts");
    const a = new Value<number>();
    const b = new Value<string>();
    a.set(1);
    b.set("x");
    const controller = new AbortController();
    const seen: string[] = [];
    const done = (async () => {
      try {
        for await (const change of followValues({ a, b }, controller.signal)) {
          seen.push(`${String(change.key)}=${change.value}`);
          if (seen.length === 4) controller.abort();
        }
      } catch (err) {
        if (!controller.signal.aborted) throw err;
      }
    })();
    await eventually(() => expect(seen.length).toBe(2));
    b.set("y");
    await eventually(() => expect(seen.length).toBe(3));
    a.set(2);
    await done;
    expect(seen.slice(0, 2).sort()).toEqual(["a=1", "b=x"]);
    expect(seen.slice(2)).toEqual(["b=y", "a=2"]);
  });
});
