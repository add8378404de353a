// A minimal QMP (QEMU Machine Protocol) client over qemu's unix socket:
// newline-delimited JSON. After the greeting and qmp_capabilities it sends
// commands one at a time ({"execute", "id"}) and matches replies by id;
// asynchronous events ({"event": ...}) go to a listener.
//
//   launcher ── execute("system_powerdown") ──▶ qemu ──ACPI power button──▶ guest PID 1
//            ◀── {"return": {}} ───────────────┘
//            ◀── {"event": "SHUTDOWN", "data": {"reason": "guest-shutdown"}}

import { connect, type Socket } from "node:net";

/** How long to keep trying to connect while qemu creates its socket. */
export const QMP_CONNECT_TIMEOUT_MS = 10_000;
const CONNECT_RETRY_MS = 50;
/** A command qemu does not answer in this time is reported as failed. */
export const QMP_COMMAND_TIMEOUT_MS = 10_000;

export class QmpError extends Error {
  override name = "QmpError";
}

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

export class QmpClient {
  private buffer = "";
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private closed = false;

  private constructor(
    private readonly socket: Socket,
    private readonly onEvent: (event: QmpEvent) => void,
  ) {
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => this.receive(chunk));
    socket.on("close", () => this.fail(new QmpError("QMP connection closed")));
    socket.on("error", (err) => this.fail(new QmpError(`QMP connection failed: ${err.message}`, { cause: err })));
  }

  /** Connects (retrying while the socket does not exist yet) and negotiates capabilities. */
  static async connect(path: string, onEvent: (event: QmpEvent) => void = () => {}, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<QmpClient> {
    const deadline = performance.now() + (options.timeoutMs ?? QMP_CONNECT_TIMEOUT_MS);
    for (;;) {
      options.signal?.throwIfAborted();
      try {
        const socket = await new Promise<Socket>((resolve, reject) => {
          const s = connect(path);
          s.once("connect", () => resolve(s));
          s.once("error", reject);
        });
        const client = new QmpClient(socket, onEvent);
        try {
          await client.greeting();
          await client.execute("qmp_capabilities");
        } catch (err) {
          client.close();
          throw err;
        }
        return client;
      } catch (err) {
        if (performance.now() > deadline) throw new QmpError(`could not connect to QMP at ${path}: ${(err as Error).message}`, { cause: err });
        await Bun.sleep(CONNECT_RETRY_MS);
      }
    }
  }

  private greetingWaiter: Pending | undefined;

  private greeting(): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new QmpError("no QMP greeting")), QMP_COMMAND_TIMEOUT_MS);
      this.greetingWaiter = { resolve: () => resolve(), reject, timer };
    });
  }

  /** Runs a QMP command and returns its "return" value; throws QmpError on an "error" reply. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    if (this.closed) return Promise.reject(new QmpError(`QMP connection closed; cannot run ${command}`));
    const id = String(this.nextId++);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new QmpError(`qemu did not answer ${command} within ${QMP_COMMAND_TIMEOUT_MS} ms`));
      }, QMP_COMMAND_TIMEOUT_MS);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      this.socket.write(JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}), id }) + "\n");
    });
  }

  /** query-status's "status": "running", "paused", "shutdown", ... */
  async status(): Promise<string> {
    const reply = await this.execute<{ status: string }>("query-status");
    return reply.status;
  }

  close(): void {
    this.socket.destroy();
    this.fail(new QmpError("QMP connection closed"));
  }

  private receive(chunk: string): void {
    this.buffer += chunk;
    let newline: number;
    while ((newline = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line === "") continue;
      let message: Record<string, unknown>;
      try {
        message = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue; // Not QMP; nothing waits for it.
      }
      this.dispatch(message);
    }
  }

  private dispatch(message: Record<string, unknown>): void {
    if ("QMP" in message) {
      const waiter = this.greetingWaiter;
      this.greetingWaiter = undefined;
      if (waiter) {
        clearTimeout(waiter.timer);
        waiter.resolve(undefined);
      }
      return;
    }
    if (typeof message.event === "string") {
      this.onEvent({ event: message.event, ...(message.data ? { data: message.data as Record<string, unknown> } : {}) });
      return;
    }
    const id = typeof message.id === "string" ? message.id : undefined;
    const waiter = id !== undefined ? this.pending.get(id) : undefined;
    if (!waiter || id === undefined) return;
    this.pending.delete(id);
    clearTimeout(waiter.timer);
    if ("error" in message) {
      const error = message.error as { class?: string; desc?: string };
      waiter.reject(new QmpError(`QMP error ${error.class ?? ""}: ${error.desc ?? JSON.stringify(error)}`));
    } else {
      waiter.resolve(message.return);
    }
  }

  private fail(err: Error): void {
    if (this.closed) return;
    this.closed = true;
    const waiters = [...this.pending.values(), ...(this.greetingWaiter ? [this.greetingWaiter] : [])];
    this.pending.clear();
    this.greetingWaiter = undefined;
    for (const waiter of waiters) {
      clearTimeout(waiter.timer);
      waiter.reject(err);
    }
  }
}
