/**
 * A refused value as an error message shows it. Errors quote what they were given, and what they
 * are given may be anything: a Backend passed where a queue name belongs, a megabyte string posted
 * to the HTTP API, an object with cycles (a connection pool), a BigInt. JSON.stringify would print
 * the first whole, echo the second back, and throw a TypeError on the last two, so the caller got
 * "Converting circular structure to JSON" instead of the InvalidInputError that says what to pass.
 * No imports: errors.ts uses it too.
 */

/** How much of a value's JSON a message quotes before it says what the rest was. */
export const SHOWN_MAX_CHARS = 200;

export function shown(value: unknown): string {
  switch (typeof value) {
    // NaN and Infinity by name (JSON would say null).
    case "number":
      return String(value);
    case "bigint":
      return `${String(value)}n`;
    case "undefined":
      return "undefined";
    case "symbol":
      return value.toString();
    case "function":
      return value.name ? `a function (${value.name})` : "a function";
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    // Cycles, or a BigInt inside: say what it is instead.
    return kindOf(value);
  }
  if (text === undefined) return String(value);
  // JSON escapes C0 but leaves DEL and C1 as they are; U+009B is a terminal's CSI, so a refused
  // id printed by the CLI or a log viewer would run as an escape sequence.
  text = text.replace(/[\u007F-\u009F]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  if (text.length <= SHOWN_MAX_CHARS) return text;
  // Not between the two halves of a surrogate pair (an emoji): half of one is not text.
  const end = /[\uD800-\uDBFF]/.test(text[SHOWN_MAX_CHARS - 1]!) ? SHOWN_MAX_CHARS - 1 : SHOWN_MAX_CHARS;
  return `${text.slice(0, end)}… (${kindOf(value)}, ${text.length} characters as JSON)`;
}

/** "a string", "an array of 3 items", "an object of class Pool", "an object". */
function kindOf(value: unknown): string {
  if (typeof value === "string") return "a string";
  if (Array.isArray(value)) return `an array of ${value.length} items`;
  const name = (value as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  return typeof name === "string" && name !== "" && name !== "Object" ? `an object of class ${name}` : "an object";
}
