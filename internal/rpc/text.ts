// What the system says back about what a caller sent.
//
// A message that quotes input (a refused node ID, a label, a log path) is
// written to a terminal, put into a gRPC status, and logged. grpc-js
// percent-encodes a status message with encodeURIComponent, which throws on
// a lone UTF-16 surrogate: a message holding one never reaches its caller,
// and the call hangs. A terminal obeys the escapes it is sent. So every
// quotation of input goes through quote(), and every status message
// through encodable() on its way out (service.ts), whatever its source.
//
// Invariants:
//  - quote() and encodable() return well-formed strings (no lone surrogate)
//    without control, format, line or paragraph separator characters;
//  - they cut at a bound counted in code points, so a cut never splits a
//    surrogate pair;
//  - nothing they return needs escaping again.

/** Control (Cc), format (Cf: bidi marks, zero-width), separators (Zl, Zp), and lone surrogates (Cs). */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/gu;

/** How much of a caller's value an error quotes. */
export const QUOTE_MAX_CHARS = 80;
/** The longest status message the servers send (gRPC sends it in a header). */
export const STATUS_MAX_CHARS = 2_000;

/** The first unprintable character in `value` (a lone surrogate included), if any. */
export function firstUnprintable(value: string): string | undefined {
  UNPRINTABLE.lastIndex = 0;
  const found = UNPRINTABLE.exec(value)?.[0];
  UNPRINTABLE.lastIndex = 0;
  return found;
}

/** `value` with every unprintable character (a lone surrogate included) written as a \u{…} escape. */
export function printable(value: string): string {
  return value.replace(UNPRINTABLE, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
}

/** At most `maxChars` code points of `value`, with "…" when it was longer. */
function cut(value: string, maxChars: number): string {
  if (value.length <= maxChars) return value;
  const points = Array.from(value);
  return points.length <= maxChars ? value : `${points.slice(0, maxChars).join("")}…`;
}

/**
 * A caller's value as an error message quotes it: in single quotes, at most
 * `maxChars` code points of it, unprintable characters escaped.
 */
export function quote(value: string, maxChars = QUOTE_MAX_CHARS): string {
  return `'${printable(cut(value, maxChars))}'`;
}

/**
 * A value made to fit a field that holds at most `maxChars` UTF-16 code
 * units of printable text (what checks of stored fields count): escaped
 * as printable() escapes it, then cut at a code point, with "…" when it
 * was longer. What a node says about itself goes out this way, so that a
 * long error in a service's message is shortened, never refused.
 */
export function fitted(value: string, maxChars: number): string {
  const shown = printable(value);
  if (shown.length <= maxChars) return shown;
  let out = "";
  for (const point of shown) {
    if (out.length + point.length > maxChars - 1) break;
    out += point;
  }
  return `${out}…`;
}

/** A message as it may go into a gRPC status or onto a terminal: bounded, printable, well-formed. */
export function encodable(message: string, maxChars = STATUS_MAX_CHARS): string {
  return printable(cut(message, maxChars));
}
