/** A JSON value: what a payload, a result or a progress report may hold. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * How deeply arrays and objects may nest in a payload, a result or metadata: far beyond any real
 * document, and far below where the recursion of JSON.stringify and of the checks that walk a
 * value would overflow the stack (about 10,000 levels).
 */
export const MAX_JSON_DEPTH = 128;

/** True when `value` nests arrays or objects more than `limit` levels deep. Iterative: safe at any depth. */
export function nestedDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (stack.length > 0) {
    const { value: v, depth } = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    if (depth + 1 > limit) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child !== null && typeof child === "object") stack.push({ value: child, depth: depth + 1 });
    }
  }
  return false;
}
