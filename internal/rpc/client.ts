// The client half of the protobuf-es binding to grpc-js (service.ts is the
// server half): a typed client per service, whose unary calls are promises
// and whose streams are async iterables, each call with an optional
// deadline and abort signal; grpc-js's errors come back as RpcError
// (errors.ts), with what a failed connection said.

import { Client as GrpcClient, Metadata, connectivityState, type ChannelCredentials, type ChannelOptions, type ClientDuplexStream, type ClientReadableStream, type ServiceError } from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type DescService, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { fromServiceError } from "./errors.ts";
import { methodPath, type MethodsOf } from "./service.ts";

/** Options of one client call. */
export interface CallOptions {
  signal?: AbortSignal;
  /** Give up after this long (DEADLINE_EXCEEDED). */
  timeoutMs?: number;
}

type ClientMethod<M> = M extends { methodKind: "unary"; input: infer I extends DescMessage; output: infer O extends DescMessage }
  ? (request: MessageInitShape<I>, options?: CallOptions) => Promise<MessageShape<O>>
  : M extends { methodKind: "server_streaming"; input: infer I extends DescMessage; output: infer O extends DescMessage }
    ? (request: MessageInitShape<I>, options?: CallOptions) => AsyncIterable<MessageShape<O>>
    : M extends { methodKind: "bidi_streaming"; input: infer I extends DescMessage; output: infer O extends DescMessage }
      ? (requests: AsyncIterable<MessageInitShape<I>>, options?: CallOptions) => AsyncIterable<MessageShape<O>>
      : never;

/** How a connection attempt ended: connected, failed (refused, TLS or identity refused), or still trying at the deadline. */
export type ConnectResult = "ready" | "failed" | "timeout";

/**
 * A typed client of a service. connect() connects (or fails) within a
 * deadline, so that callers with several servers can move on from one that
 * is down without spending a whole call's deadline on it; close() releases
 * the channel.
 */
export type ServiceClient<S> = { [K in keyof MethodsOf<S>]: ClientMethod<MethodsOf<S>[K]> } & {
  connect(timeoutMs: number): Promise<ConnectResult>;
  close(): void;
};

export interface ClientOptions {
  credentials: ChannelCredentials;
  channelOptions?: ChannelOptions;
  /** Headers sent with every call (containerd's API takes its namespace so). */
  metadata?: Readonly<Record<string, string>>;
}

function callOptionsOf(options: CallOptions | undefined) {
  return options?.timeoutMs !== undefined ? { deadline: new Date(Date.now() + options.timeoutMs) } : {};
}

/** Creates a typed client for `service` at `target` (host:port). */
export function createClient<S extends DescService>(service: S, target: string, options: ClientOptions): ServiceClient<S> {
  const client = new GrpcClient(target, options.credentials, options.channelOptions);
  const headers = () => {
    const metadata = new Metadata();
    for (const [key, value] of Object.entries(options.metadata ?? {})) metadata.set(key, value);
    return metadata;
  };
  const out: Record<string, unknown> = {
    close: () => client.close(),
    connect: (timeoutMs: number) => connect(client, Date.now() + timeoutMs),
  };
  for (const method of service.methods) {
    const path = methodPath(service, method.name);
    const name = `${service.name}/${method.name}`;
    const serialize = (message: MessageInitShape<DescMessage>) => Buffer.from(toBinary(method.input, create(method.input, message)));
    const deserialize = (bytes: Buffer) => fromBinary(method.output, bytes);
    switch (method.methodKind) {
      case "unary":
        out[method.localName] = (request: MessageInitShape<DescMessage>, callOptions?: CallOptions) =>
          new Promise((resolve, reject) => {
            callOptions?.signal?.throwIfAborted();
            const call = client.makeUnaryRequest(path, serialize, deserialize, request, headers(), callOptionsOf(callOptions), (err, response) => {
              callOptions?.signal?.removeEventListener("abort", onAbort);
              if (err) reject(fromServiceError(err, name));
              else resolve(response);
            });
            const onAbort = () => call.cancel();
            callOptions?.signal?.addEventListener("abort", onAbort, { once: true });
          });
        break;
      case "server_streaming":
        out[method.localName] = (request: MessageInitShape<DescMessage>, callOptions?: CallOptions) =>
          streamResponses(client.makeServerStreamRequest(path, serialize, deserialize, request, headers(), callOptionsOf(callOptions)), name, callOptions?.signal);
        break;
      case "bidi_streaming":
        out[method.localName] = (requests: AsyncIterable<MessageInitShape<DescMessage>>, callOptions?: CallOptions) => {
          const call = client.makeBidiStreamRequest(path, serialize, deserialize, headers(), callOptionsOf(callOptions));
          return streamResponses(call, name, callOptions?.signal, sendRequests(call, requests));
        };
        break;
      default:
        throw new Error(`${name}: ${method.methodKind} methods are not supported`);
    }
  }
  return out as ServiceClient<S>;
}

/**
 * Waits for the channel to be READY or to fail, until `deadline`. The
 * deadline is a timer, and Node's loop runs due timers before it reads the
 * sockets: a process whose loop was blocked past the deadline (a loaded
 * machine, a long synchronous step) would call a connection refused in the
 * meantime a timeout. So the deadline's verdict waits one turn
 * (setImmediate runs after the sockets are read) and looks again.
 */
function connect(client: GrpcClient, deadline: number): Promise<ConnectResult> {
  const channel = client.getChannel();
  const outcome = (state: connectivityState): ConnectResult | undefined =>
    state === connectivityState.READY ? "ready" : state === connectivityState.TRANSIENT_FAILURE || state === connectivityState.SHUTDOWN ? "failed" : undefined;
  return new Promise((resolve) => {
    const atDeadline = () => setImmediate(() => resolve(outcome(channel.getConnectivityState(false)) ?? "timeout"));
    const check = () => {
      const state = channel.getConnectivityState(true);
      const result = outcome(state);
      if (result) resolve(result);
      else channel.watchConnectivityState(state, deadline, (err) => (err ? atDeadline() : check()));
    };
    check();
  });
}

/**
 * Feeds a client's requests into a bidirectional call, half-closing when
 * they run out. Returns a stop function that ends the feeding (and the
 * request iterable) once the call is over.
 */
function sendRequests<T>(call: ClientDuplexStream<T, unknown>, requests: AsyncIterable<T>): () => void {
  const iterator = requests[Symbol.asyncIterator]();
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    void iterator.return?.();
  };
  void (async () => {
    try {
      for (;;) {
        const next = await iterator.next();
        if (stopped || next.done) break;
        if (!call.write(next.value)) await new Promise<void>((resolve) => call.once("drain", resolve));
      }
      if (!stopped) call.end();
    } catch {
      // The requests failed (their signal aborted, most likely): end the call.
      if (!stopped) call.cancel();
    }
  })();
  return stop;
}

async function* streamResponses<T>(call: ClientReadableStream<T> | ClientDuplexStream<unknown, T>, name: string, signal: AbortSignal | undefined, onEnd?: () => void): AsyncIterable<T> {
  const onAbort = () => call.cancel();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for await (const message of call) yield message as T;
  } catch (err) {
    if (signal?.aborted) throw signal.reason;
    throw fromServiceError(err as ServiceError, name);
  } finally {
    signal?.removeEventListener("abort", onAbort);
    call.cancel();
    onEnd?.();
  }
}
