// A minimal DER (ASN.1 Distinguished Encoding Rules) writer: just enough of
// the encoding to build X.509 certificates. Parsing is left to node:crypto's
// X509Certificate, which is backed by BoringSSL in bun.

/** An encoded DER element (tag, length and contents). */
export type Der = Uint8Array;

function encodeLength(length: number): Uint8Array {
  if (length < 0x80) return Uint8Array.of(length);
  const bytes: number[] = [];
  for (let rest = length; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest & 0xff);
  return Uint8Array.of(0x80 | bytes.length, ...bytes);
}

/** An element with the given tag byte around raw contents. */
export function element(tag: number, contents: Uint8Array): Der {
  const length = encodeLength(contents.length);
  const out = new Uint8Array(1 + length.length + contents.length);
  out[0] = tag;
  out.set(length, 1);
  out.set(contents, 1 + length.length);
  return out;
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

export const sequence = (...items: Der[]): Der => element(0x30, concat(items));
export const set = (...items: Der[]): Der => element(0x31, concat(items));
export const boolean = (value: boolean): Der => element(0x01, Uint8Array.of(value ? 0xff : 0x00));
export const octetString = (bytes: Uint8Array): Der => element(0x04, bytes);
export const utf8String = (text: string): Der => element(0x0c, new TextEncoder().encode(text));

/** A non-negative INTEGER from big-endian bytes or a small number. */
export function integer(value: number | Uint8Array): Der {
  let bytes: Uint8Array;
  if (typeof value === "number") {
    const digits: number[] = [];
    for (let rest = value; rest > 0; rest = Math.floor(rest / 256)) digits.unshift(rest & 0xff);
    bytes = Uint8Array.from(digits.length ? digits : [0]);
  } else {
    let start = 0;
    while (start < value.length - 1 && value[start] === 0) start++;
    bytes = value.subarray(start);
  }
  // A set high bit would read as negative: DER prepends a zero byte.
  if ((bytes[0] ?? 0) & 0x80) bytes = concat([Uint8Array.of(0), bytes]);
  return element(0x02, bytes);
}

/** A BIT STRING holding whole bytes (no unused bits), such as a signature. */
export const bitString = (bytes: Uint8Array): Der => element(0x03, concat([Uint8Array.of(0), bytes]));

/**
 * A named-bit BIT STRING (like keyUsage): bit 0 is the most significant bit
 * of the first byte; trailing zero bits are dropped as DER requires.
 */
export function namedBits(bits: readonly number[]): Der {
  const highest = Math.max(...bits);
  const bytes = new Uint8Array(Math.floor(highest / 8) + 1);
  for (const bit of bits) bytes[bit >> 3]! |= 0x80 >> (bit & 7);
  const unused = 7 - (highest & 7);
  return element(0x03, concat([Uint8Array.of(unused), bytes]));
}

export function objectIdentifier(dotted: string): Der {
  const arcs = dotted.split(".").map(Number);
  const out: number[] = [arcs[0]! * 40 + arcs[1]!];
  for (const arc of arcs.slice(2)) {
    const base128: number[] = [];
    for (let rest = arc; ; rest = Math.floor(rest / 128)) {
      base128.unshift((rest & 0x7f) | (base128.length ? 0x80 : 0));
      if (rest < 128) break;
    }
    out.push(...base128);
  }
  return element(0x06, Uint8Array.from(out));
}

/** UTCTime before 2050, GeneralizedTime from then on (RFC 5280 4.1.2.5). */
export function time(date: Date): Der {
  const pad = (n: number, width = 2) => String(n).padStart(width, "0");
  const rest = pad(date.getUTCMonth() + 1) + pad(date.getUTCDate()) + pad(date.getUTCHours()) + pad(date.getUTCMinutes()) + pad(date.getUTCSeconds()) + "Z";
  const year = date.getUTCFullYear();
  const text = year < 2050 ? pad(year % 100) + rest : pad(year, 4) + rest;
  return element(year < 2050 ? 0x17 : 0x18, new TextEncoder().encode(text));
}

/** A context-specific tag: [n] EXPLICIT wraps an element, IMPLICIT replaces its tag. */
export const explicit = (n: number, inner: Der): Der => element(0xa0 | n, inner);
export const implicitPrimitive = (n: number, contents: Uint8Array): Der => element(0x80 | n, contents);
