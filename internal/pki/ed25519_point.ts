// Is a 32-byte string a canonical Ed25519 public key?
//
// OpenSSL (and so node:crypto) imports any 32 bytes as an Ed25519 public
// key: 32 × 0xff, a point that is not on the curve, or one of the eight
// points of small order all become KeyObjects. A key that arrives from
// outside (a join key, a key to certify) must be a real point that a real
// private key could have made, so it is checked here before it is stored or
// certified (RFC 8032 §5.1.3 decoding, plus a small-order check).
//
// This is decoding, not cryptography: it never signs or verifies anything,
// so plain BigInt arithmetic is fine (it is not constant-time, and need not
// be: public keys are public).

const P = 2n ** 255n - 19n;
const D = mod(-121665n * inverse(121666n));
/** sqrt(-1) mod p. */
const SQRT_M1 = power(2n, (P - 1n) / 4n);

function mod(a: bigint): bigint {
  const r = a % P;
  return r < 0n ? r + P : r;
}

function power(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  let e = exponent;
  while (e > 0n) {
    if (e & 1n) result = mod(result * b);
    b = mod(b * b);
    e >>= 1n;
  }
  return result;
}

function inverse(a: bigint): bigint {
  return power(a, P - 2n);
}

/** The curve point a public key encodes, or undefined if it encodes none (RFC 8032 §5.1.3). */
function decode(raw: Uint8Array): { x: bigint; y: bigint } | undefined {
  if (raw.length !== 32) return undefined;
  const bytes = Uint8Array.from(raw);
  const sign = bytes[31]! >> 7;
  bytes[31]! &= 0x7f;
  let y = 0n;
  for (let i = 31; i >= 0; i--) y = (y << 8n) | BigInt(bytes[i]!);
  if (y >= P) return undefined; // Non-canonical: y must be reduced.
  const u = mod(y * y - 1n);
  const v = mod(D * y * y + 1n);
  // x = u v^3 (u v^7)^((p-5)/8), then fix up by sqrt(-1) if needed.
  let x = mod(u * power(v, 3n) * power(u * power(v, 7n), (P - 5n) / 8n));
  const vx2 = mod(v * x * x);
  if (vx2 === mod(-u)) x = mod(x * SQRT_M1);
  else if (vx2 !== u) return undefined; // Not on the curve.
  if (x === 0n && sign === 1) return undefined; // Non-canonical: -0.
  if (Number(x & 1n) !== sign) x = mod(-x);
  return { x, y };
}

/** Doubles a point in extended coordinates (a = -1). */
function double(p: { X: bigint; Y: bigint; Z: bigint }): { X: bigint; Y: bigint; Z: bigint } {
  const A = mod(p.X * p.X);
  const B = mod(p.Y * p.Y);
  const C = mod(2n * p.Z * p.Z);
  const E = mod((p.X + p.Y) * (p.X + p.Y) - A - B);
  const G = mod(B - A);
  const F = mod(G - C);
  const H = mod(-A - B);
  return { X: mod(E * F), Y: mod(G * H), Z: mod(F * G) };
}

/**
 * Whether `raw` is the canonical encoding of an Ed25519 point that is not of
 * small order: the only public keys a real private key produces.
 */
export function isCanonicalEd25519PublicKey(raw: Uint8Array): boolean {
  const point = decode(raw);
  if (!point) return false;
  // Small order: [8]P is the identity (X = 0, Y = Z).
  let q = { X: point.x, Y: point.y, Z: 1n };
  for (let i = 0; i < 3; i++) q = double(q);
  return !(q.X === 0n && q.Y === q.Z);
}
