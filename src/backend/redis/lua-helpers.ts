/**
 * Which helpers of lua/_common.lua each script carries. Redis runs a script's whole text on every
 * call, so every `local function` of the helpers file is a closure built again on each call, used
 * or not: with all of them in front of every script that is a few µs per call, a measurable share
 * of a single enqueue (docs/performance-redis.md). So each script gets only the top-level
 * definitions it names, directly or through another helper it keeps, in the file's order.
 *
 * The helpers file keeps a shape this relies on: each top-level definition starts at column 0 as
 * `local function NAME(` (ending at an `end` at column 0) or `local NAME = …` on one line, and the
 * comment lines right above a definition belong to it. A helper can only use helpers defined
 * above it (Lua locals), so keeping the file's order keeps every helper's references in scope.
 * Names are found as whole identifiers anywhere outside full-line comments, strings included: a
 * name that is only mentioned keeps its helper (harmless), a name that is used is never missed.
 */

/** One top-level definition of the helpers file, with the comment lines right above it. */
interface HelperPart {
  readonly name: string;
  readonly text: string;
  /** Identifiers its code (not its comments) mentions. */
  readonly mentions: ReadonlySet<string>;
}

export interface LuaHelpers {
  /** What precedes the first definition (the file's header comment). */
  readonly preamble: string;
  readonly parts: readonly HelperPart[];
}

const DEFINITION = /^local (?:function )?([A-Za-z_]\w*)/;
const IDENTIFIER = /[A-Za-z_]\w*/g;

/** The identifiers a piece of Lua mentions, full-line comments and the `--[[ … ]]` header left out. */
export function mentionedIdentifiers(lua: string): Set<string> {
  const code = lua
    .replace(/--\[\[[\s\S]*?\]\]/g, "")
    .split("\n")
    .filter((line) => !/^\s*--/.test(line))
    .join("\n");
  return new Set(code.match(IDENTIFIER) ?? []);
}

/** Cuts the helpers file into its top-level definitions (see the file comment for the shape). */
export function parseLuaHelpers(common: string): LuaHelpers {
  const lines = common.split("\n");
  const starts: number[] = [];
  for (const [i, line] of lines.entries()) {
    if (!DEFINITION.test(line)) continue;
    // The comment lines right above a definition are its own.
    let start = i;
    while (start > 0 && lines[start - 1]!.startsWith("--") && !starts.includes(start - 1)) start--;
    starts.push(start);
  }
  if (starts.length === 0) return { preamble: common, parts: [] };
  const parts: HelperPart[] = starts.map((start, k) => {
    const text = lines.slice(start, starts[k + 1] ?? lines.length).join("\n");
    const definition = lines.slice(start).find((line) => DEFINITION.test(line))!;
    const name = DEFINITION.exec(definition)![1]!;
    const mentions = mentionedIdentifiers(text);
    mentions.delete(name);
    return { name, text, mentions };
  });
  const names = parts.map((p) => p.name);
  const repeated = names.find((name, i) => names.indexOf(name) !== i);
  if (repeated !== undefined) throw new Error(`lua/_common.lua defines ${repeated} twice at top level; each helper needs a name of its own`);
  return { preamble: lines.slice(0, starts[0]).join("\n"), parts };
}

/**
 * The helpers a script needs, as text to put before it: every definition `body` names, and every
 * definition those name, transitively, in the helpers file's order.
 */
export function helpersFor(helpers: LuaHelpers, body: string): string {
  const byName = new Map(helpers.parts.map((p) => [p.name, p]));
  const kept = new Set<string>();
  const pending = [...mentionedIdentifiers(body)];
  while (pending.length > 0) {
    const name = pending.pop()!;
    const part = byName.get(name);
    if (part === undefined || kept.has(name)) continue;
    kept.add(name);
    pending.push(...part.mentions);
  }
  return [helpers.preamble, ...helpers.parts.filter((p) => kept.has(p.name)).map((p) => p.text)].join("\n");
}
