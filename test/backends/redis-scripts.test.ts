/**
 * Each Redis script carries only the helpers of lua/_common.lua it uses (src/backend/redis/lua-helpers.ts).
 * A helper left out would surface only when the line calling it runs (Redis refuses a script's
 * access to an undefined global at run time, not at load), so the check here is static: every
 * helper name a script mentions is defined in that script. Plus what the cut is for: scripts
 * really are smaller, and every script still compiles in Redis.
 */
import { readFileSync } from "node:fs";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { inject } from "vitest";
import { helpersFor, mentionedIdentifiers, parseLuaHelpers } from "../../src/backend/redis/lua-helpers.js";
import { loadScripts } from "../../src/backend/redis/scripts.js";
import { requireRedis } from "../helpers/redis.js";

const common = readFileSync(new URL("../../src/backend/redis/lua/_common.lua", import.meta.url), "utf8");
const helperNames = new Set(parseLuaHelpers(common).parts.map((p) => p.name));
/** Top-level definitions of a script's text, in order. */
const definedIn = (source: string) => [...source.matchAll(/^local (?:function )?([A-Za-z_]\w*)/gm)].map((m) => m[1]!);

describe("the helpers each Redis script carries", () => {
  it("the helpers file parses into its top-level definitions", () => {
    expect(helperNames.size).toBeGreaterThan(30);
    for (const name of ["int", "layout_guard", "log_event", "compact_add", "dedup_decide", "flow_settled", "KEPT", "STATE_NAMES"])
      expect(helperNames).toContain(name);
  });

  for (const eventLog of [true, false]) {
    it(`every helper a script mentions is defined in it, before its body (event log ${eventLog ? "on" : "off"})`, () => {
      for (const [name, script] of loadScripts(eventLog)) {
        for (const { source } of [script.plain, script.flagged]) {
          const defined = definedIn(source);
          const missing = [...mentionedIdentifiers(source)].filter((id) => helperNames.has(id) && !defined.includes(id));
          expect(missing, `${name} uses helpers it does not define`).toEqual([]);
          // Each helper is defined once: a script's text never repeats one.
          expect(new Set(defined).size, `${name} defines a name twice`).toBe(defined.length);
        }
      }
    });
  }

  it("a script leaves out the helpers it does not use", () => {
    const scripts = loadScripts(true);
    const complete = definedIn(scripts.get("complete")!.plain.source);
    const enqueue = definedIn(scripts.get("enqueue")!.plain.source);
    expect(enqueue).toEqual(expect.arrayContaining(["layout_guard", "log_event", "compact_add", "compact_pack", "dedup_decide", "wake"]));
    expect(enqueue).not.toContain("flow_settled");
    expect(complete).not.toContain("dedup_decide");
    expect(complete).not.toContain("compact_add");
    // No script needs every helper.
    for (const [name, script] of scripts)
      expect(definedIn(script.plain.source).filter((id) => helperNames.has(id)).length, name).toBeLessThan(helperNames.size);
  });

  it("keeps what a kept helper uses, transitively, in the file's order, and nothing else", () => {
    const helpers = parseLuaHelpers(
      [
        "--[[ header ]]",
        "local LIMIT = 3",
        "-- c's comment",
        "local function c(x)",
        "  return x + LIMIT",
        "end",
        "local function b(x)",
        "  return c(x) -- b calls c",
        "end",
        "local function unused()",
        "  return b(1)",
        "end",
        "-- a's comment names unused, which does not keep it",
        "local function a(x)",
        "  return b(x)",
        "end",
      ].join("\n"),
    );
    const kept = helpersFor(helpers, "return a(1)");
    expect(definedIn(kept)).toEqual(["LIMIT", "c", "b", "a"]);
    expect(kept).toContain("-- c's comment");
    expect(kept).toContain("--[[ header ]]");
    expect(definedIn(helpersFor(helpers, "return LIMIT"))).toEqual(["LIMIT"]);
  });
});

describe("the scripts on a real Redis", () => {
  const url = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
  const admin = new Redis(url);
  afterAll(() => admin.quit());

  it("every script of both sets compiles (SCRIPT LOAD) and Redis hashes it as Conveyor does", async () => {
    for (const eventLog of [true, false]) {
      for (const [name, script] of loadScripts(eventLog)) {
        const { source, sha } = script.flagged;
        expect(await admin.script("LOAD", source), name).toBe(sha);
      }
    }
  });
});
