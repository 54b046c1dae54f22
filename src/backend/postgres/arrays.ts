/**
 * PostgreSQL array literals (`{"a","b",NULL}`) for the batch statements' `$n::text[]`-style
 * parameters, built here rather than by node-postgres: its generic serializer runs two regular
 * expressions over every element, which for a 20,000-job enqueue costs more than the INSERT
 * itself. These are specialised by element kind and end in one `join`.
 *
 * Inside double quotes an array element is literal except for `"` and `\`, which take a
 * backslash; NULL unquoted is SQL NULL.
 */

const NEEDS_ESCAPE = /["\\]/;
const ESCAPE = /["\\]/g;

/** Arbitrary strings (ids, names, SQL NULL for null). */
export function textArray(values: ReadonlyArray<string | null>): string {
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    parts[i] = v == null ? "NULL" : NEEDS_ESCAPE.test(v) ? `"${v.replace(ESCAPE, "\\$&")}"` : `"${v}"`;
  }
  return `{${parts.join(",")}}`;
}

/**
 * Strings that are JSON texts made by `JSON.stringify` (payloads, results, errors). Such a text
 * holds no raw control character or lone surrogate, so `JSON.stringify` of it is exactly the
 * quoted array element: `"` and `\` get their backslash and nothing else changes (the `\n` of an
 * escaped newline is two characters, the backslash doubled). Native, hence much faster than
 * escaping by hand.
 */
export function jsonTextArray(values: ReadonlyArray<string | null>): string {
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    parts[i] = v == null ? "NULL" : JSON.stringify(v);
  }
  return `{${parts.join(",")}}`;
}

/** Integers (ms, tokens, counts); null is SQL NULL. */
export function integerArray(values: ReadonlyArray<number | null>): string {
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    parts[i] = v == null ? "NULL" : String(v);
  }
  return `{${parts.join(",")}}`;
}
