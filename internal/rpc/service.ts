// Generated protobuf-es services as grpc-js services (the clients:
// client.ts).
//
// protobuf-es describes services (GenService) but ships no grpc-js binding;
// this file is its server half. Requests reach the server as raw bytes and are
// parsed here, so a malformed or oversized request becomes INVALID_ARGUMENT
// with a reason instead of grpc-js's generic INTERNAL.

import { Metadata, type Server, type ServerDuplexStream, type ServerUnaryCall, type ServerWritableStream, type ServiceDefinition, type ServiceError, type sendUnaryData } from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type DescService, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import type { GenService, GenServiceMethods } from "@bufbuild/protobuf/codegenv2";
import type { X509Certificate } from "node:crypto";
import { TLSSocket } from "node:tls";
import { InvalidArgumentError, PermissionDeniedError, Status, UnauthenticatedError, toStatus } from "./errors.ts";
import { authenticate, refusal, type Peer, type Policy } from "./peer.ts";
import { sourceAddress } from "./address.ts";
import { encodable } from "./text.ts";
import { connectionOf, peerCertificateOf } from "./tls.ts";
import { connectionUsed } from "./listener.ts";

/** The `ca` of a service served only on a unix socket (listenLocal): its callers hold no certificate, and a TLS caller is never asked about. */
export const LOCAL_SERVICE: () => X509Certificate = () => {
  throw new Error("a local service is served on a unix socket only; it has no CA to check certificates against");
};

/** Requests larger than this are refused with INVALID_ARGUMENT. */
export const MAX_REQUEST_BYTES = 1024 * 1024;

/** The methods of a generated service, by name (for the server's tables and the client's, client.ts). */
export type MethodsOf<S> = S extends GenService<infer R extends GenServiceMethods> ? R : never;

/** What a handler knows about its call. */
export interface CallContext {
  /** The authenticated caller; already checked against the method's policy. */
  peer: Peer;
  /** Aborts when the client cancels or disconnects. */
  signal: AbortSignal;
  /** `Service/Method`, for logs and errors. */
  method: string;
  /**
   * The address the call came from, as the connection shows it (an IPv4
   * address mapped into IPv6 given as IPv4): proven by the TCP handshake,
   * not claimed by the caller. Undefined when the socket does not say.
   */
  remoteAddress: string | undefined;
  /**
   * Lets this caller's connection carry up to `bytes` of requests ahead of
   * what the handler has read (HTTP/2 flow control, connection and
   * streams): for a method that receives bulk data from a caller it has
   * already admitted. The default window is 64 KiB, one round trip's worth:
   * 0.64 MB/s at a round trip of 100 ms, whatever the link. At most
   * MAX_RECEIVE_WINDOW_BYTES.
   */
  widenReceiveWindow(bytes: number): void;
}

/** The largest receive window a handler may open for its caller (widenReceiveWindow). */
export const MAX_RECEIVE_WINDOW_BYTES = 16 * 1024 * 1024;

/** Opens a session's receive window to `bytes`: its connection window now, and every stream's through SETTINGS. */
export function widenWindow(session: object, bytes: number): void {
  const target = Math.min(Math.max(0, Math.floor(bytes)), MAX_RECEIVE_WINDOW_BYTES);
  const http2 = session as { state?: { localWindowSize?: number }; setLocalWindowSize?: (n: number) => void; settings?: (s: { initialWindowSize: number }) => void };
  if ((http2.state?.localWindowSize ?? 0) >= target) return;
  http2.setLocalWindowSize?.(target);
  http2.settings?.({ initialWindowSize: target });
}

type Handler<M> = M extends { methodKind: "unary"; input: infer I extends DescMessage; output: infer O extends DescMessage }
  ? (request: MessageShape<I>, ctx: CallContext) => Promise<MessageInitShape<O>>
  : M extends { methodKind: "server_streaming"; input: infer I extends DescMessage; output: infer O extends DescMessage }
    ? (request: MessageShape<I>, ctx: CallContext) => AsyncIterable<MessageInitShape<O>>
    : M extends { methodKind: "bidi_streaming"; input: infer I extends DescMessage; output: infer O extends DescMessage }
      ? (requests: AsyncIterable<MessageShape<I>>, ctx: CallContext) => AsyncIterable<MessageInitShape<O>>
      : never;

/** An implementation of every method of a service. */
export type ServiceImpl<S> = { [K in keyof MethodsOf<S>]: Handler<MethodsOf<S>[K]> };

/** Who may call each method. Every method must be listed: a forgotten check is a type error. */
export type ServicePolicy<S> = { [K in keyof MethodsOf<S>]: Policy };

export interface ServeOptions<S> {
  /** The cluster CA that owner and node certificates must chain to (LOCAL_SERVICE for a service on a unix socket only). */
  ca: () => X509Certificate;
  policy: ServicePolicy<S>;
  /** Called for every call that fails, with the status it returned. */
  onError?: (method: string, err: unknown) => void;
  /**
   * Turns a failure the handlers did not classify into the error it means
   * to the caller (the curator: etcd's errors are UNAVAILABLE), before it
   * becomes a status. What it leaves alone is INTERNAL.
   */
  mapError?: (err: unknown) => unknown;
  /**
   * Checks, for every call, after its policy and before its fields, that
   * the caller's right still holds where a certificate alone cannot prove
   * it (a node deleted from the cluster keeps its certificate); throws the
   * refusal.
   */
  admit?: (peer: Peer, signal: AbortSignal) => Promise<void>;
  /**
   * When the caller of a stream loses its right to it (a node deleted, or
   * no longer UP): resolves with the error the stream then ends with, and
   * never resolves while the right holds. Called once per stream, with a
   * signal that aborts when the stream ends. Streams also end when the
   * caller's certificate expires, with or without this.
   */
  revoked?: (peer: Peer, signal: AbortSignal) => Promise<Error>;
  /**
   * Told of every call once, when it ends, with how it ended (a stream
   * too, however long it lived), refusals included. The audit trail's tap;
   * it must not throw or block (what it throws is dropped).
   */
  audit?: (call: AuditedCall) => void;
  /** Told how every call goes, for the node's metrics (internal/metrics); like audit, it must not throw or block. */
  meter?: CallMeter;
}

/**
 * What the metrics learn of calls. A unary call is `finished` when
 * answered; a stream is `opened`, then `finished` when it ends (its
 * seconds: how long it lived); a stream refused before it opened is only
 * `finished`. `code` is the status's name: OK, PERMISSION_DENIED, ...
 */
export interface CallMeter {
  opened(method: string): void;
  finished(method: string, kind: "unary" | "stream", code: string, seconds: number, opened: boolean): void;
}

/** A call as the audit hook sees it. */
export interface AuditedCall {
  /** `Service/Method`. */
  method: string;
  /** The method's name in the service implementation (approveNode). */
  localName: string;
  /** The caller, once its certificate was read; undefined if the call failed before. */
  peer: Peer | undefined;
  remoteAddress: string | undefined;
  /** The parsed request, if it got that far (a client stream's first). */
  request: unknown;
  /** Why the call failed; absent if it succeeded. */
  error?: unknown;
}

/** The longest timer setTimeout keeps (about 24.8 days); longer ones fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Watches a stream caller's rights while the stream lives: its certificate's
 * expiry, and options.revoked. When one ends, `end` is called with the error
 * the stream ends with. Returns the function that stops watching.
 */
function guardRights<S>(peer: Peer, options: ServeOptions<S>, end: (err: Error) => void): () => void {
  const scope = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  if (peer.kind !== "anonymous" && peer.kind !== "local") {
    const validTo = Date.parse(peer.certificate.validTo);
    const arm = () => {
      const left = validTo - Date.now();
      if (left <= 0) return end(new UnauthenticatedError("the client certificate expired while its stream was open"));
      timer = setTimeout(arm, Math.min(left, MAX_TIMER_MS));
    };
    arm();
  }
  options.revoked?.(peer, scope.signal).then(
    (err) => {
      if (!scope.signal.aborted) end(err);
    },
    () => {},
  );
  return () => {
    clearTimeout(timer);
    scope.abort();
  };
}

/** A method's gRPC path: "/<package.Service>/<Method>". */
export function methodPath(service: DescService, name: string): string {
  return `/${service.typeName}/${name}`;
}

function parseRequest<I extends DescMessage>(schema: I, bytes: Buffer): MessageShape<I> {
  if (bytes.length > MAX_REQUEST_BYTES) {
    throw new InvalidArgumentError(`request is ${bytes.length} bytes, more than the limit of ${MAX_REQUEST_BYTES}`);
  }
  try {
    return fromBinary(schema, bytes);
  } catch (err) {
    throw new InvalidArgumentError(`malformed ${schema.typeName}: ${(err as Error).message}`);
  }
}

function check(peer: Peer, policy: Policy): void {
  const refused = refusal(peer, policy);
  if (!refused) return;
  if (refused.code === "unauthenticated") throw new UnauthenticatedError(refused.reason);
  throw new PermissionDeniedError(refused.reason);
}

type RawCall = ServerUnaryCall<Buffer, Buffer> | ServerWritableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>;

/** A connection's caller, as authenticated under `ca`, and when that answer holds. */
interface Authenticated {
  ca: X509Certificate;
  peer: Peer;
  /** The certificate's validity, in ms since the epoch: the answer holds only between these. */
  validFrom: number;
  validTo: number;
}

/** Callers by connection (the HTTP/2 session); an entry goes with its connection. */
const callers = new WeakMap<object, Authenticated>();

/**
 * Who is calling, authenticated once per connection rather than once per
 * call: parsing the certificate and checking its signature cost more than a
 * cached read. The client certificate of a TLS connection cannot change
 * while it is open (TLS 1.3 has no renegotiation, HTTP/2 forbids it under
 * TLS 1.2, and bun's BoringSSL never renegotiates as a server), so only
 * what depends on the moment is checked per call: the answer is reused
 * while now lies within the certificate's validity (an expired certificate
 * is refused on its connection's next call) and the CA is the same object.
 */
function callerOf({ session, socket }: ReturnType<typeof connectionOf>, caOf: () => X509Certificate): Peer {
  // A unix socket of a local service (listenLocal): no TLS, the file's permissions admitted the caller.
  if (!(socket instanceof TLSSocket)) return { kind: "local" };
  const ca = caOf();
  const now = Date.now();
  const known = callers.get(session);
  if (known && known.ca === ca && now >= known.validFrom && now <= known.validTo) return known.peer;
  const certificate = peerCertificateOf(socket.getPeerCertificate());
  const peer = authenticate(certificate, ca);
  const validity = certificate ? { validFrom: Date.parse(certificate.validFrom), validTo: Date.parse(certificate.validTo) } : { validFrom: -Infinity, validTo: Infinity };
  // An answer given outside the validity (expired, not yet valid) is never reused.
  if (now >= validity.validFrom && now <= validity.validTo) callers.set(session, { ca, peer, ...validity });
  return peer;
}

/** What the audit hook learns of a call as it goes. */
interface Seen {
  peer?: Peer;
  remoteAddress?: string | undefined;
  request?: unknown;
}

function contextOf<S>(call: RawCall, method: string, policy: Policy, options: ServeOptions<S>, seen: Seen): { ctx: CallContext; controller: AbortController } {
  const connection = connectionOf(call);
  seen.remoteAddress = sourceAddress(connection.socket.remoteAddress);
  const peer = callerOf(connection, options.ca);
  seen.peer = peer;
  check(peer, policy);
  // Let in: the connection has made a call (listener.ts), and an owner's or a node's source is known.
  connectionUsed(connection.socket, peer.kind === "owner" || peer.kind === "node");
  const controller = new AbortController();
  (call as NodeJS.EventEmitter).once("cancelled", () => controller.abort(new Error(`${method}: cancelled by client`)));
  const widenReceiveWindow = (bytes: number) => widenWindow(connection.session, bytes);
  return { ctx: { peer, signal: controller.signal, method, remoteAddress: seen.remoteAddress, widenReceiveWindow }, controller };
}

/**
 * Serves one stream: the handler's responses go out while the caller's
 * rights hold (guardRights); when they end, the handler is stopped and the
 * stream ends with the error that says why.
 */
async function serveStream<S>(
  call: ServerWritableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>,
  { ctx, controller }: ReturnType<typeof contextOf>,
  options: ServeOptions<S>,
  responses: (ctx: CallContext) => AsyncIterable<MessageInitShape<DescMessage>>,
  serialize: (message: MessageInitShape<DescMessage>) => Buffer,
): Promise<void> {
  let revokedWith: Error | undefined;
  const stop = guardRights(ctx.peer, options, (err) => {
    revokedWith ??= err;
    controller.abort(err);
  });
  try {
    await writeResponses(call, responses(ctx), serialize, ctx.signal, () => revokedWith);
  } catch (err) {
    throw revokedWith ?? err;
  } finally {
    stop();
  }
}

/**
 * Writes a handler's responses to a stream, waiting for the client to
 * drain, then ends it. Each wait takes its listeners off again: a followed
 * stream waits thousands of times on the same call and signal.
 */
export async function writeResponses(
  call: ServerWritableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>,
  responses: AsyncIterable<MessageInitShape<DescMessage>>,
  serialize: (message: MessageInitShape<DescMessage>) => Buffer,
  signal: AbortSignal,
  revoked: () => Error | undefined,
): Promise<void> {
  for await (const message of responses) {
    if (signal.aborted) break;
    if (!call.write(serialize(message))) {
      await new Promise<void>((resolve) => {
        const done = () => {
          call.off("drain", done);
          signal.removeEventListener("abort", done);
          resolve();
        };
        call.once("drain", done);
        signal.addEventListener("abort", done, { once: true });
      });
    }
  }
  const refusal = revoked();
  if (refusal) throw refusal;
  if (!call.cancelled) call.end();
}

/**
 * A client's stream of requests, each checked and parsed like a unary
 * request; a malformed one ends the call with INVALID_ARGUMENT. The
 * iterable ends when the client half-closes or cancels.
 */
/** The requests as they come, the first kept in `seen` for the audit hook. */
async function* firstSeen<T>(requests: AsyncIterable<T>, seen: Seen): AsyncIterable<T> {
  for await (const request of requests) {
    seen.request ??= request;
    yield request;
  }
}

async function* parseRequests<I extends DescMessage>(schema: I, call: ServerDuplexStream<Buffer, Buffer>, signal: AbortSignal): AsyncIterable<MessageShape<I>> {
  // Read through events, not the stream's async iterator: under bun, that
  // iterator never sees a grpc-js server stream's end.
  const queue: Buffer[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  const onData = (bytes: Buffer) => {
    queue.push(bytes);
    // Backpressure: read on once the handler has taken what is queued.
    call.pause();
    wake?.();
  };
  const onEnd = () => {
    ended = true;
    wake?.();
  };
  call.on("data", onData);
  call.once("end", onEnd);
  call.once("close", onEnd);
  signal.addEventListener("abort", onEnd, { once: true });
  try {
    for (;;) {
      const bytes = queue.shift();
      if (bytes) {
        yield parseRequest(schema, bytes);
        continue;
      }
      if (ended || signal.aborted) return;
      call.resume();
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    call.off("data", onData);
    call.off("end", onEnd);
    call.off("close", onEnd);
    signal.removeEventListener("abort", onEnd);
  }
}

/** Adds a service implementation to a grpc-js server. */
export function addService<S extends DescService>(server: Server, service: S, impl: ServiceImpl<S>, options: ServeOptions<S>): void {
  const definition: Record<string, ServiceDefinition[string]> = {};
  const handlers: Record<string, (...args: never[]) => void> = {};
  for (const method of service.methods) {
    const path = methodPath(service, method.name);
    const name = `${service.name}/${method.name}`;
    const policy = (options.policy as Record<string, Policy>)[method.localName];
    const handler = (impl as Record<string, (req: unknown, ctx: CallContext) => unknown>)[method.localName];
    if (!policy || !handler) throw new Error(`${name}: no ${policy ? "handler" : "policy"} given`);
    const serialize = (message: MessageInitShape<DescMessage>) => Buffer.from(toBinary(method.output, create(method.output, message)));
    const base = {
      path,
      requestStream: false,
      requestSerialize: (b: Buffer) => b,
      requestDeserialize: (b: Buffer) => b,
      responseSerialize: (b: Buffer) => b,
      responseDeserialize: (b: Buffer) => b,
    };
    const fail = (err: unknown) => {
      options.onError?.(name, err);
      const { code, details, trailers } = toStatus(options.mapError ? options.mapError(err) : err);
      const metadata = new Metadata();
      // A header value is printable ASCII; anything else is escaped.
      for (const [key, value] of Object.entries(trailers ?? {}))
        metadata.set(
          key,
          encodable(value).replace(/[^ -~]/g, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`),
        );
      return { code, details: encodable(details), metadata } as Partial<ServiceError> as ServiceError;
    };
    // Sending a status cannot fail with an encodable message; should grpc-js
    // throw anyway, the call still ends, with a plain INTERNAL, rather than
    // hanging while the node logs an unhandled rejection.
    const audit = (seen: Seen, error?: unknown) => {
      try {
        options.audit?.({ method: name, localName: method.localName, peer: seen.peer, remoteAddress: seen.remoteAddress, request: seen.request, ...(error === undefined ? {} : { error }) });
      } catch {
        // The audit trail's own trouble is its own.
      }
    };
    const codeOf = (err: unknown) => (err === undefined ? "OK" : (Status[toStatus(options.mapError ? options.mapError(err) : err).code] ?? "UNKNOWN"));
    const meter = {
      opened: () => {
        try {
          options.meter?.opened(name);
        } catch {
          // The metrics' trouble is their own.
        }
      },
      finished: (kind: "unary" | "stream", started: number, opened: boolean, error?: unknown) => {
        try {
          options.meter?.finished(name, kind, codeOf(error), (performance.now() - started) / 1000, opened);
        } catch {
          // The metrics' trouble is their own.
        }
      },
    };
    const plain = () => ({ code: Status.INTERNAL, details: "internal error: the status could not be sent", metadata: new Metadata() }) as Partial<ServiceError> as ServiceError;
    const lastResort = (send: (status?: ServiceError) => void) => {
      try {
        send();
      } catch (err) {
        options.onError?.(name, err);
        try {
          send(plain());
        } catch {
          // Nothing more can be sent on this call.
        }
      }
    };
    // A stream is admitted, then opened (its request parsed, for a server
    // stream), served until it ends, and audited once then, with how it
    // ended (a refusal before it opened, with its error); a client stream's
    // first request stands for its request.
    const stream = async (
      call: ServerWritableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>,
      open: (seen: Seen) => (ctx: CallContext) => AsyncIterable<MessageInitShape<DescMessage>>,
    ) => {
      const seen: Seen = {};
      const started = performance.now();
      let opened = false;
      try {
        const context = contextOf(call, name, policy, options, seen);
        await options.admit?.(context.ctx.peer, context.ctx.signal);
        const responses = open(seen);
        opened = true;
        meter.opened();
        await serveStream(call, context, options, responses, serialize);
        audit(seen);
        meter.finished("stream", started, true);
      } catch (err) {
        audit(seen, err);
        meter.finished("stream", started, opened, err);
        if (!call.cancelled) lastResort((status) => call.emit("error", status ?? fail(err)));
      }
    };
    switch (method.methodKind) {
      case "unary":
        definition[method.localName] = { ...base, responseStream: false, originalName: method.name };
        handlers[method.localName] = (async (call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>) => {
          const seen: Seen = {};
          const started = performance.now();
          try {
            const { ctx } = contextOf(call, name, policy, options, seen);
            await options.admit?.(ctx.peer, ctx.signal);
            const request = parseRequest(method.input, call.request);
            seen.request = request;
            const response = await (handler(request, ctx) as Promise<MessageInitShape<DescMessage>>);
            audit(seen);
            meter.finished("unary", started, false);
            callback(null, serialize(response));
          } catch (err) {
            audit(seen, err);
            meter.finished("unary", started, false, err);
            lastResort((status) => callback(status ?? fail(err)));
          }
        }) as never;
        break;
      case "server_streaming":
        definition[method.localName] = { ...base, responseStream: true, originalName: method.name };
        handlers[method.localName] = ((call: ServerWritableStream<Buffer, Buffer>) =>
          stream(call, (seen) => {
            const request = parseRequest(method.input, call.request);
            seen.request = request;
            return (ctx) => handler(request, ctx) as AsyncIterable<MessageInitShape<DescMessage>>;
          })) as never;
        break;
      case "bidi_streaming":
        definition[method.localName] = { ...base, requestStream: true, responseStream: true, originalName: method.name };
        handlers[method.localName] = ((call: ServerDuplexStream<Buffer, Buffer>) =>
          stream(call, (seen) => (ctx) => handler(firstSeen(parseRequests(method.input, call, ctx.signal), seen), ctx) as AsyncIterable<MessageInitShape<DescMessage>>)) as never;
        break;
      default:
        throw new Error(`${name}: ${method.methodKind} methods are not supported`);
    }
  }
  server.addService(definition, handlers as never);
}
