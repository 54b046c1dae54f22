/**
 * pageDeadLetters (src/backend/listing.ts): how RabbitMQ and Kafka page the dead letters they read
 * whole into memory, the one copy both use. Same order and cursors as the SQL stores' listing.
 */
import { describe, expect, it } from "vitest";
import { checkListArgs, pageDeadLetters } from "../../src/backend/listing.js";
import type { ListFilter, Page } from "../../src/backend/contract.js";
import { InvalidInputError } from "../../src/core/errors.js";
import type { JobRecord } from "../../src/core/job.js";

const dead = (id: string, finishedAt: number, extra: Partial<JobRecord> = {}): JobRecord => ({
  id,
  queue: "q",
  name: "job",
  data: null,
  state: "dead",
  priority: 0,
  attempt: 1,
  maxAttempts: 1,
  backoff: { type: "fixed", delayMs: 0 },
  timeoutMs: null,
  runAt: 0,
  createdAt: 100,
  startedAt: 0,
  finishedAt,
  lease: null,
  progress: null,
  result: null,
  error: null,
  history: [],
  stalls: 0,
  replays: 0,
  meta: null,
  ...extra,
});

// Finished at 1..6; "c" and "d" share a finish time (ties go by id, descending).
const letters = [dead("a", 1), dead("b", 2), dead("c", 3), dead("d", 3), dead("e", 5), dead("f", 6, { name: "other", createdAt: 50 })];
const page = (given: ListFilter, p: Page) => {
  const filter: ListFilter = { state: "dead", queue: "q", ...given };
  return pageDeadLetters(letters, filter, checkListArgs(filter, p)).map((j) => j.id);
};

describe("pageDeadLetters", () => {
  it("orders newest finished first, ties by id descending, and pages by limit and offset", () => {
    expect(page({}, {})).toEqual(["f", "e", "d", "c", "b", "a"]);
    expect(page({}, { limit: 2 })).toEqual(["f", "e"]);
    expect(page({}, { limit: 2, offset: 2 })).toEqual(["d", "c"]);
  });

  it("filters by name and creation window", () => {
    expect(page({ name: "other" }, {})).toEqual(["f"]);
    expect(page({ createdFrom: 60 }, {})).toEqual(["e", "d", "c", "b", "a"]);
    expect(page({ createdUntil: 60 }, {})).toEqual(["f"]);
  });

  it("pages forward after a cursor and back before one, and refuses a cursor that is gone", () => {
    expect(page({}, { after: "d", limit: 2 })).toEqual(["c", "b"]);
    expect(page({}, { before: "c", limit: 2 })).toEqual(["e", "d"]);
    expect(page({}, { before: "e", limit: 5 })).toEqual(["f"]);
    expect(() => page({}, { after: "gone" })).toThrow(InvalidInputError);
    expect(() => page({}, { before: "gone" })).toThrow(/page.before: job "gone" is not in queue "q"/);
  });
});
