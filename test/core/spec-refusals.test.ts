/**
 * buildJobSpec's refusals (moved out of the conformance suite: no store involved; the stores'
 * own answer to hand-made bad specs is test/conformance/checks.ts).
 */
import { describe, expect, it } from "vitest";
import { InvalidInputError } from "../../src/core/errors.js";
import { buildJobSpec, DEFAULT_MAX_PAYLOAD_BYTES, type JobOptions } from "../../src/core/spec.js";
import { MAX_JSON_DEPTH } from "../../src/core/json.js";
import type { JobSpec } from "../../src/core/job.js";
import { shown, SHOWN_MAX_CHARS } from "../../src/core/shown.js";
import { Queue } from "../../src/producer/queue.js";

function spec(input: JobOptions & { data?: unknown } = {}): JobSpec {
  const { data = {}, ...options } = input;
  return buildJobSpec({ queue: "q", name: "job", data, options });
}

describe("invalid input is refused by buildJobSpec", () => {
  class Money {
    constructor(readonly cents: number) {}
  }
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic.self = cyclic;
  /** `levels` arrays, each the only element of the one around it. */
  const nested = (levels: number): unknown => {
    let value: unknown = 1;
    for (let i = 0; i < levels; i++) value = [value];
    return value;
  };

  const badOptions: Array<[string, JobOptions, RegExp]> = [
    ["an unknown option", { retries: 3 } as unknown as JobOptions, /unknown job option "retries"/],
    ["attempts 0", { attempts: 0 }, /option attempts must be an integer from 1/],
    ["fractional attempts", { attempts: 1.5 }, /option attempts must be an integer/],
    ["a negative delay", { delayMs: -1 }, /option delayMs must be an integer from 0/],
    ["a bad backoff type", { backoff: { type: "linear", delayMs: 5 } } as unknown as JobOptions, /backoff\.type must be "exponential" or "fixed"/],
    ["a backoff function", { backoff: (() => 5) as unknown as JobOptions["backoff"] }, /backoff cannot be a function/],
    ["a fractional priority", { priority: 0.5 }, /option priority must be an integer/],
    ["an empty jobId", { jobId: "" }, /option jobId must be a non-empty string/],
    ["a NaN runAt", { runAt: Number.NaN }, /option runAt must be a Date or milliseconds/],
    ["a bad removeOnComplete", { removeOnComplete: "yes" } as unknown as JobOptions, /option removeOnComplete must be true, false or \{ ageMs \}/],
    ["meta that is an array", { meta: [1, 2] } as unknown as JobOptions, /option meta must be a plain JSON object/],
    ["meta holding a BigInt", { meta: { id: 1n } } as unknown as JobOptions, /meta of job "job" is not JSON: meta\.id is a BigInt/],
  ];
  for (const [what, options, message] of badOptions) {
    it(`refuses ${what}`, () => {
      expect(() => buildJobSpec({ queue: "q", name: "job", data: {}, options })).toThrow(InvalidInputError);
      expect(() => buildJobSpec({ queue: "q", name: "job", data: {}, options })).toThrow(message);
    });
  }

  const badNames: Array<[string, { queue: string; name: string }, RegExp]> = [
    ["an empty queue name", { queue: "", name: "job" }, /^queue name must be/],
    ["a queue name with a space", { queue: "my queue", name: "job" }, /^queue name must be/],
    ["a job name starting with a dash", { queue: "q", name: "-job" }, /^job name must be/],
    ["a job name over 128 characters", { queue: "q", name: "j".repeat(129) }, /^job name must be/],
  ];
  for (const [what, names, message] of badNames) {
    it(`refuses ${what}`, () => {
      expect(() => buildJobSpec({ ...names, data: {} })).toThrow(InvalidInputError);
      expect(() => buildJobSpec({ ...names, data: {} })).toThrow(message);
    });
  }

  const badPayloads: Array<[string, unknown, RegExp]> = [
    ["a BigInt", { amount: 10n }, /data\.amount is a BigInt/],
    ["a function", { cb: () => 1 }, /data\.cb is a function/],
    ["NaN", { n: Number.NaN }, /data\.n is NaN/],
    ["Infinity", [1, Number.POSITIVE_INFINITY], /data\[1\] is Infinity/],
    ["a cycle", cyclic, /contains a cycle/],
    ["a class instance", { price: new Money(5) }, /data\.price is an instance of Money/],
    ["undefined inside an array", [1, undefined, 3], /data\[1\] is undefined/],
    ["a symbol", { s: Symbol("x") }, /data\.s is a symbol/],
    // The path is assembled from the refused value outwards (spec.ts): every step, in order.
    ["NaN deep in arrays and objects", { a: [1, { b: undefined, c: [2, Number.NaN] }] }, /: data\.a\[1\]\.c\[1\] is NaN, which JSON cannot represent\./],
    ["a cycle below the root", { outer: { list: [cyclic] } }, /: data\.outer\.list\[0\]\.self contains a cycle\./],
    ["arrays nested too deep", { deep: nested(MAX_JSON_DEPTH + 1) }, /: data\.deep\[0\][[\]0]*… nests arrays or objects more than 128 levels deep/],
  ];
  for (const [what, data, message] of badPayloads) {
    it(`refuses a payload holding ${what}`, () => {
      expect(() => spec({ data })).toThrow(InvalidInputError);
      expect(() => spec({ data })).toThrow(message);
      expect(() => spec({ data })).toThrow(/is not JSON/);
    });
  }

  it("accepts a value met twice that is not its own ancestor (JSON writes it twice)", () => {
    const shared = { id: 1 };
    expect(JSON.parse(spec({ data: { a: shared, b: [shared, shared] } }).payload)).toEqual({ a: { id: 1 }, b: [{ id: 1 }, { id: 1 }] });
  });

  it(`refuses a payload over ${DEFAULT_MAX_PAYLOAD_BYTES} bytes and accepts one exactly at the limit`, () => {
    // A JSON string is its characters plus two quotes.
    const atLimit = "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES - 2);
    expect(spec({ data: atLimit }).payload).toHaveLength(DEFAULT_MAX_PAYLOAD_BYTES);
    expect(() => spec({ data: atLimit + "x" })).toThrow(InvalidInputError);
    expect(() => spec({ data: atLimit + "x" })).toThrow(/is 262145 bytes, over the limit of 262144/);
    // Bytes, not characters: 2-byte characters reach the limit at half the length.
    expect(() => spec({ data: "é".repeat(DEFAULT_MAX_PAYLOAD_BYTES / 2) })).toThrow(/over the limit/);
  });
});

describe("a refused value is quoted, not dumped (shown)", () => {
  const caught = (fn: () => unknown): unknown => {
    try {
      fn();
    } catch (error) {
      return error;
    }
    throw new Error("expected a throw");
  };

  it("refuses an object passed as the queue name with a short InvalidInputError, not the object's whole JSON", () => {
    // The mistake `new Queue({ backend, name })` makes: the first argument is the options object.
    const big = { backend: { description: "sqlite:/tmp/x.db", statements: Array.from({ length: 500 }, (_, i) => `SELECT ${i}`) }, name: "emails" };
    const error = caught(() => new Queue(big as unknown as string, { backend: null as never }));
    expect(error).toBeInstanceOf(InvalidInputError);
    const message = (error as Error).message;
    expect(message).toMatch(/^queue name must be 1-128 characters .*; got \{"backend":/);
    expect(message).toMatch(/… \(an object, \d+ characters as JSON\)$/);
    expect(message.length).toBeLessThan(500);
    expect(JSON.stringify(big).length).toBeGreaterThan(5_000);
  });

  it("refuses a value with a cycle or a BigInt as InvalidInputError (JSON.stringify would throw a TypeError)", () => {
    class Pool {
      self = this;
    }
    const cyclic = caught(() => buildJobSpec({ queue: new Pool() as unknown as string, name: "job", data: {}, options: {} }));
    expect(cyclic).toBeInstanceOf(InvalidInputError);
    expect((cyclic as Error).message).toMatch(/; got an object of class Pool$/);
    const bigint = caught(() => buildJobSpec({ queue: "q", name: "job", data: {}, options: { priority: 5n as unknown as number } }));
    expect(bigint).toBeInstanceOf(InvalidInputError);
    expect((bigint as Error).message).toMatch(/option priority must be an integer .*; got 5n$/);
  });

  it("quotes short values whole and cuts long ones", () => {
    expect(shown("emails")).toBe('"emails"');
    expect(shown(Number.NaN)).toBe("NaN");
    expect(shown(undefined)).toBe("undefined");
    expect(shown(() => 1)).toBe("a function");
    expect(shown(Symbol("s"))).toBe("Symbol(s)");
    expect(shown([1, 2])).toBe("[1,2]");
    const long = "x".repeat(10_000);
    expect(shown(long)).toBe(`"${"x".repeat(SHOWN_MAX_CHARS - 1)}… (a string, 10002 characters as JSON)`);
    expect(shown(Array.from({ length: 1000 }, () => 1))).toMatch(/… \(an array of 1000 items, 2001 characters as JSON\)$/);
    // A cut that would fall inside a surrogate pair falls before it: no half emoji in the message.
    const emojis = shown(`${"x".repeat(SHOWN_MAX_CHARS - 2)}${"😀".repeat(100)}`);
    expect(emojis.startsWith(`"${"x".repeat(SHOWN_MAX_CHARS - 2)}…`)).toBe(true);
    expect(emojis).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
  });
});
