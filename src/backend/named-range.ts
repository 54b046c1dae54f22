/**
 * Code units where JavaScript's string order (UTF-16 code units) may differ from byte order of
 * UTF-8 (i.e. code point order): surrogates and U+E000–U+FFFF.
 */
const ORDER_MAY_DIFFER = /[\uD800-\uFFFF]/;

/** Whether `a` sorts before `b` byte-wise in UTF-8: PostgreSQL's COLLATE "C", SQLite's BINARY. */
export function bytewiseBefore(a: string, b: string): boolean {
  if (ORDER_MAY_DIFFER.test(a) || ORDER_MAY_DIFFER.test(b)) return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8")) < 0;
  return a < b;
}

/**
 * The first and the last of `names` in byte order (UTF-8), the range a claim's loose scan of the
 * waiting rows walks (PostgreSQL's claim.sql, SQLite's pending-queues.sql), or null for no names.
 * Made once per queue list (checked-lists.ts, preparedFor), not per claim.
 */
export function byteOrderRange(names: readonly string[]): { first: string; last: string } | null {
  if (names.length === 0) return null;
  let first = names[0]!;
  let last = first;
  for (const name of names) {
    if (bytewiseBefore(name, first)) first = name;
    else if (bytewiseBefore(last, name)) last = name;
  }
  return { first, last };
}
