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

/**
 * Arbitrary strings (ids, names, SQL NULL for null). A batch without NULL, `"` or `\` (ids and
 * names almost always) is quoted by native joins instead of a test and a template per element.
 */
export function textArray(values: ReadonlyArray<string | null>): string {
  if (values.length > 0 && !hasNull(values) && !NEEDS_ESCAPE.test(values.join(""))) return `{"${values.join('","')}"}`;
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
  // One call for the whole batch: `JSON.stringify` of the array quotes each element as above and
  // writes null (or undefined) as `null`, which an array literal reads as NULL (any letter case).
  const json = JSON.stringify(values);
  return `{${json.slice(1, -1)}}`;
}

/** Integers (ms, tokens, counts); null is SQL NULL. Without a null, one native join. */
export function integerArray(values: ReadonlyArray<number | null>): string {
  if (!hasNull(values)) return `{${values.join(",")}}`;
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    parts[i] = v == null ? "NULL" : String(v);
  }
  return `{${parts.join(",")}}`;
}

/** Whether any element is null or undefined (which `join` would write as an empty element). */
function hasNull(values: ReadonlyArray<unknown>): boolean {
  for (let i = 0; i < values.length; i++) if (values[i] == null) return true;
  return false;
}
