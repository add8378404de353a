// Hostile text for the trust boundary's tests: strings that no encoder,
// terminal or length check of ours may stumble over (astral characters cut
// in half, lone surrogates, NUL, terminal escapes, bidirectional overrides,
// very long runs), and requests of any API whose every string field holds
// such text, found through the message's descriptor so that a field added
// later is fuzzed too.

import { create, ScalarType, type DescField, type DescMessage, type DescService, type MessageShape } from "@bufbuild/protobuf";
import { RpcError, Status, type CallOptions, type ServiceClient } from "../rpc/mod.ts";
import { seededRandom } from "./mod.ts";

/** Pieces hostile text is made of. */
const PIECES = [
  "\u{1f600}", // an astral character: two UTF-16 units
  "\ud83d", // a lone high surrogate
  "\ude00", // a lone low surrogate
  "\u0000",
  "\u001b[2J\u001b[31m", // terminal escapes: clear screen, red
  "\u202e", // right-to-left override
  "\u200b", // zero-width space
  "\r\n",
  "%", // grpc-js percent-encodes status messages
  "'\"\\",
  "node-",
  "0123456789abcdef",
  "é",
  "\u{10ffff}",
];

/** One hostile string: pieces, sometimes after a run that puts an astral character across a quoting cut. */
export function hostileString(random: () => number): string {
  const parts: string[] = [];
  // Runs of 39, 59, 79 … units put an astral character across the usual cuts.
  if (random() < 0.5) parts.push(`${"x".repeat([39, 59, 79, 511, 1999][Math.floor(random() * 5)]!)}\u{1f600}`);
  const count = 1 + Math.floor(random() * 8);
  for (let i = 0; i < count; i++) parts.push(PIECES[Math.floor(random() * PIECES.length)]!);
  if (random() < 0.1) parts.push("\u{1f600}".repeat(5000));
  return parts.join("");
}

/** Whether a message is fit for a status or a terminal: well-formed, with no control, format or separator characters. */
export function isPrintableText(text: string): boolean {
  return text.isWellFormed() && !/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(text);
}

/** Makes the text of one string field. */
export type TextSource = () => string;

/** Text with an astral character straddling a cut at `cut` UTF-16 units (the lengths errors used to quote). */
export function straddling(cut: number): TextSource {
  return () => `${"x".repeat(cut - 1)}\u{1f600}`;
}

function hostileValue(field: DescField, text: TextSource, depth: number): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return field.scalar === ScalarType.STRING ? text() : undefined;
    case "message":
      return depth > 0 ? withHostileStrings(field.message, text, depth - 1) : undefined;
    case "list":
      if (field.listKind === "scalar" && field.scalar === ScalarType.STRING) return [text(), text()];
      if (field.listKind === "message" && depth > 0) return [withHostileStrings(field.message, text, depth - 1)];
      return undefined;
    case "map":
      if (field.mapKey !== ScalarType.STRING && !(field.mapKind === "scalar" && field.scalar === ScalarType.STRING)) return undefined;
      return { [field.mapKey === ScalarType.STRING ? text() : "1"]: field.mapKind === "scalar" && field.scalar === ScalarType.STRING ? text() : undefined };
    default:
      return undefined;
  }
}

/** A message of `schema` whose every string field (nested ones to `depth` levels, lists and maps too) holds text from `text`. */
export function withHostileStrings<D extends DescMessage>(schema: D, text: TextSource, depth = 3): MessageShape<D> {
  const message = create(schema) as Record<string, unknown>;
  for (const field of schema.fields) {
    const value = hostileValue(field, text, depth);
    if (value === undefined) continue;
    if (field.oneof) message[field.oneof.localName] = { case: field.localName, value };
    else message[field.localName] = value;
  }
  return message as MessageShape<D>;
}

/** The string fields of `schema` and below, as dotted paths: what withHostileStrings fills. */
export function stringFields(schema: DescMessage, depth = 3, prefix = ""): string[] {
  const found: string[] = [];
  for (const field of schema.fields) {
    const path = `${prefix}${field.name}`;
    if ((field.fieldKind === "scalar" || field.fieldKind === "list") && field.scalar === ScalarType.STRING) found.push(path);
    else if (field.fieldKind === "map" && (field.mapKey === ScalarType.STRING || (field.mapKind === "scalar" && field.scalar === ScalarType.STRING))) found.push(path);
    else if ((field.fieldKind === "message" || (field.fieldKind === "list" && field.listKind === "message")) && depth > 0) found.push(...stringFields(field.message!, depth - 1, `${path}.`));
  }
  return found;
}

/** How one hostile call ended. */
export interface HostileOutcome {
  method: string;
  /** The status code, or "served" when the call answered (a stream: its first message, or its end). */
  result: Status | "served";
  details: string;
}

/** How long a stream may stay silent before its first message counts as a hang. */
const FIRST_MESSAGE_MS = 3_000;

/**
 * Calls every method of `service` through `client` with a request whose
 * every string field holds text from `text`
 * (a stream method: until its first message, then cancels) and says how each
 * ended. A call that found no status before its deadline ends as
 * DEADLINE_EXCEEDED, which the tests refuse.
 */
export async function callEveryMethod<S extends DescService>(service: S, client: ServiceClient<S>, text: TextSource, timeoutMs = 5_000): Promise<HostileOutcome[]> {
  const outcomes: HostileOutcome[] = [];
  const methods = client as unknown as Record<string, (request: unknown, options: CallOptions) => unknown>;
  for (const method of service.methods) {
    const request = withHostileStrings(method.input, text);
    const controller = new AbortController();
    const name = `${service.name}/${method.name}`;
    try {
      if (method.methodKind === "unary") {
        await methods[method.localName]!(request, { timeoutMs, signal: controller.signal });
      } else {
        const requests = method.methodKind === "bidi_streaming" ? oneThenWait(request, controller.signal) : request;
        const stream = methods[method.localName]!(requests, { timeoutMs, signal: controller.signal }) as AsyncIterable<unknown>;
        const iterator = stream[Symbol.asyncIterator]();
        let timer: ReturnType<typeof setTimeout> | undefined;
        const silent = new Promise<"silent">((resolve) => (timer = setTimeout(() => resolve("silent"), FIRST_MESSAGE_MS)));
        const first = await Promise.race([iterator.next(), silent]);
        clearTimeout(timer);
        if (first === "silent") {
          outcomes.push({ method: name, result: Status.DEADLINE_EXCEEDED, details: `no message and no status within ${FIRST_MESSAGE_MS} ms` });
          controller.abort();
          continue;
        }
        controller.abort();
        await iterator.return?.();
      }
      outcomes.push({ method: name, result: "served", details: "" });
    } catch (err) {
      if (err instanceof RpcError) outcomes.push({ method: name, result: err.code, details: err.details });
      else if (controller.signal.aborted) outcomes.push({ method: name, result: "served", details: "" });
      else throw err;
    } finally {
      controller.abort();
    }
  }
  return outcomes;
}

/** A request stream that sends one message, then stays open until `signal` aborts. */
async function* oneThenWait<T>(message: T, signal: AbortSignal): AsyncIterable<T> {
  yield message;
  await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}

/** The texts a hostile test runs through: an astral character across each usual cut, then `random` rounds of hostile strings from `seed`. */
export function hostileRounds(seed: number, random = 4): TextSource[] {
  const next = seededRandom(seed);
  return [...[40, 60, 80].map(straddling), ...Array.from({ length: random }, () => () => hostileString(next))];
}

/**
 * What is wrong with how hostile calls ended, one line each (none: every
 * call ended with a status within its deadline, and every status message
 * is printable). `expected`, if given, is the only result the caller may get.
 */
export function answerProblems(outcomes: readonly HostileOutcome[], who: string, expected?: Status): string[] {
  const problems: string[] = [];
  for (const outcome of outcomes) {
    const what = `${outcome.method} as ${who}: ${outcome.result === "served" ? "served" : Status[outcome.result]} ${JSON.stringify(outcome.details)}`;
    if (outcome.result === Status.DEADLINE_EXCEEDED || outcome.result === Status.UNKNOWN) problems.push(`no status: ${what}`);
    if (!isPrintableText(outcome.details)) problems.push(`unprintable: ${what}`);
    if (expected !== undefined && outcome.result !== expected) problems.push(`not ${Status[expected]}: ${what}`);
  }
  return problems;
}
