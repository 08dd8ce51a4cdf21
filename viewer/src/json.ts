// JSON read without losing a digit: journal values may hold u64s (a seed, a
// guest's own numbers) that JSON.parse would round. Numbers keep their
// source text (the reviver's `context.source`), and `canon` writes a value
// the way the host's serde_json does (compact, keys sorted), so an emitted
// document and its journal entry compare as text.

/** A JSON number, as written. */
export class Num {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

/** Parses JSON keeping every number exact (as a `Num`). */
export function parseExact(text: string): any {
  const reviver = function (_key: string, value: unknown, context?: { source?: string }) {
    if (typeof value === 'number') return new Num(context?.source ?? String(value));
    return value;
  };
  return JSON.parse(text, reviver as any);
}

function canonNumber(text: string): string {
  if (/^-?\d+$/.test(text)) return BigInt(text).toString();
  const n = Number(text);
  return Number.isInteger(n) && Math.abs(n) < 2 ** 53 ? `${n}.0` : String(n);
}

/** The canonical text of a value from `parseExact` (or plain JSON). */
export function canon(v: any): string {
  if (v instanceof Num) return canonNumber(v.text);
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'number') return canonNumber(String(v));
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string' || typeof v === 'boolean') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`;
}

/** A JSON text's canonical form; `null` when it is not JSON. */
export function canonText(text: string): string | null {
  try {
    return canon(parseExact(text));
  } catch {
    return null;
  }
}

/** A number field of a `parseExact` value as a BigInt (0 when absent). */
export function big(v: any): bigint {
  if (v === undefined || v === null) return 0n;
  return BigInt(v instanceof Num ? v.text : String(v));
}
