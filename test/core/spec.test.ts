import { describe, expect, it } from "vitest";
import { InvalidInputError } from "../../src/core/errors.js";
import { buildJobSpec, type JobOptions } from "../../src/core/spec.js";

/** The InvalidInputError buildJobSpec throws for this input. */
function refusal(input: { queue?: string; name?: string; data?: unknown; options?: JobOptions; maxPayloadBytes?: number }): InvalidInputError {
  try {
    buildJobSpec({ queue: "q", name: "n", data: null, ...input });
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidInputError);
    return error as InvalidInputError;
  }
  throw new Error("buildJobSpec accepted it");
}

describe("buildJobSpec refusals name their field", () => {
  it.each([
    [{ name: "bad name!" }, "name"],
    [{ queue: "" }, "queue"],
    [{ data: { f: () => 1 } }, "data"],
    [{ data: "x".repeat(100), maxPayloadBytes: 10 }, "data"],
    [{ options: { meta: { d: new Map() } as never } }, "options.meta"],
    [{ options: { priority: 1.5 } }, "options.priority"],
    [{ options: { backoff: { type: "fixed", delayMs: -1 } } }, "options.backoff.delayMs"],
    [{ options: { backoff: { type: "linear" } as never } }, "options.backoff.type"],
    [{ options: { removeOnFail: { ageMs: -5 } } }, "options.removeOnFail.ageMs"],
    [{ options: { runAt: -1 } }, "options.runAt"],
    [{ options: { jobId: "" } }, "options.jobId"],
    [{ options: { colour: "red" } as never }, "options.colour"],
  ] as const)("%j -> %s", (input, field) => {
    expect(refusal(input as Parameters<typeof refusal>[0]).field).toBe(field);
  });
});
