/**
 * The checking facade (src/backend/checked.ts) in front of every store: the same bad argument
 * gets the same InvalidInputError (naming the field) from every backend, and nothing is written.
 * Specs are made by hand here, past `buildJobSpec`, the way a caller of the Backend contract
 * (the HTTP service, a relay, a custom producer) could hand them over.
 */
import { describe, expect, it } from "vitest";
import { InvalidInputError, UnsupportedByStoreError } from "../../src/core/errors.js";
import type { FlowNodeSpec, JobSpec, JobState } from "../../src/core/job.js";
import type { ListFilter, Page } from "../../src/backend/contract.js";
import { A, claimOne, enqueueOne, errorInfo, itNeeds, LEASE_MS, mustGet, NAME, QUEUE, spec, totalJobs, type SuiteContext } from "./fixtures.js";

/** Values no numeric argument takes: not a number, not finite, negative, fractional, beyond 2^53. */
const HOSTILE_NUMBERS: ReadonlyArray<[string, unknown]> = [
  ["NaN", Number.NaN],
  ["Infinity", Number.POSITIVE_INFINITY],
  ["-Infinity", Number.NEGATIVE_INFINITY],
  ["-1", -1],
  ["1.5", 1.5],
  ["2^53", 2 ** 53],
  ["1e300", 1e300],
  ['"5"', "5"],
  ["null", null],
];

/** Spec fields, the job option each stands for, and the hostile values a store must refuse for it. */
const SPEC_FIELDS: ReadonlyArray<{ key: keyof JobSpec; field: string; refused: ReadonlyArray<[string, unknown]> }> = [
  { key: "priority", field: "options.priority", refused: [...HOSTILE_NUMBERS.filter(([w]) => w !== "-1"), ["2000000", 2_000_000]] },
  { key: "delayMs", field: "options.delayMs", refused: HOSTILE_NUMBERS },
  { key: "maxAttempts", field: "options.attempts", refused: [...HOSTILE_NUMBERS, ["0", 0]] },
  { key: "timeoutMs", field: "options.timeoutMs", refused: [...HOSTILE_NUMBERS.filter(([w]) => w !== "null"), ["0", 0]] },
  { key: "runAt", field: "options.runAt", refused: [...HOSTILE_NUMBERS.filter(([w]) => w !== "null" && w !== "1.5"), ["year 10000", Date.UTC(10_000, 0, 1)]] },
  { key: "retainCompletedMs", field: "options.removeOnComplete", refused: HOSTILE_NUMBERS.filter(([w]) => w !== "null") },
  { key: "retainDeadMs", field: "options.removeOnFail", refused: HOSTILE_NUMBERS.filter(([w]) => w !== "null") },
];

/** The error a refused call must end with: an InvalidInputError naming `field` (when given) and matching `message`. */
async function refused(call: Promise<unknown>, message: RegExp, field?: string): Promise<void> {
  const error: unknown = await call.then(
    () => new Error("the call was accepted"),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(InvalidInputError);
  expect((error as Error).message).toMatch(message);
  if (field !== undefined) expect((error as InvalidInputError).field).toBe(field);
}

export function checkTests(t: SuiteContext): void {
  describe("checked arguments (the facade in front of every store)", () => {
    for (const { key, field, refused: values } of SPEC_FIELDS) {
      it(`enqueue refuses a spec whose ${key} is ${values.map(([w]) => w).join(", ")}; nothing is stored`, async () => {
        for (const [what, value] of values) {
          const bad = { ...spec({ jobId: `bad-${key}` }), [key]: value };
          await refused(t.b.enqueue([spec({ jobId: "good" }), bad]), new RegExp(`${field.replace(".", "\\.")} must be`), field).catch((e: unknown) => {
            throw new Error(`${key} = ${what}: ${String(e)}`);
          });
        }
        if (t.factory.capabilities.jobRecords) expect(await totalJobs(t.b)).toBe(0);
      });
    }

    it("enqueue refuses a bad backoff, a NUL in the payload, and a spec that is no object", async () => {
      const cases: Array<[JobSpec, string]> = [
        [{ ...spec(), backoff: { type: "fixed", delayMs: Number.NaN } }, "options.backoff"],
        [{ ...spec(), backoff: { type: "exponential", delayMs: 1_000, maxDelayMs: Number.POSITIVE_INFINITY } }, "options.backoff"],
        [{ ...spec(), backoff: { type: "linear" } as unknown as JobSpec["backoff"] }, "options.backoff"],
        [{ ...spec(), payload: '"a\u0000b"' }, "data"],
        [{ ...spec(), payload: null as unknown as string }, "data"],
        [{ ...spec(), id: "" }, "options.jobId"],
      ];
      for (const [bad, field] of cases) await refused(t.b.enqueue([bad]), /must be/, field);
      await refused(t.b.enqueue([null as unknown as JobSpec]), /must be an object/);
      await refused(t.b.enqueue("jobs" as unknown as JobSpec[]), /enqueue takes an array/);
      if (t.factory.capabilities.jobRecords) expect(await totalJobs(t.b)).toBe(0);
    });

    it("claim refuses a limit or lease that is not a positive integer of ms, before touching any job", async () => {
      await enqueueOne(t.b);
      const request = { queues: [QUEUE], names: [NAME], worker: A, limit: 1, leaseMs: LEASE_MS };
      for (const [what, limit] of [...HOSTILE_NUMBERS, ["0", 0] as [string, unknown]]) {
        await refused(t.b.claim({ ...request, limit: limit as number }), /claim limit must be an integer from 1 to 100000/).catch((e: unknown) => {
          throw new Error(`limit = ${what}: ${String(e)}`);
        });
      }
      for (const [what, leaseMs] of [...HOSTILE_NUMBERS.filter(([w]) => w !== "1.5"), ["0", 0] as [string, unknown]]) {
        await refused(t.b.claim({ ...request, leaseMs: leaseMs as number }), /leaseMs must be a number of milliseconds from 1 to/).catch((e: unknown) => {
          throw new Error(`leaseMs = ${what}: ${String(e)}`);
        });
      }
      await refused(t.b.claim({ ...request, queues: ["bad queue"] }), /queue name must be/, "queue");
      // Nothing was claimed by the refused calls: the job is still there for a good one.
      expect(await claimOne(t.b)).toBeDefined();
    });

    it("heartbeat, fail and the settle calls refuse a bad lease length, delay or lease; nothing changes", async () => {
      const id = await enqueueOne(t.b, { attempts: 3 });
      const c = await claimOne(t.b);
      for (const [what, leaseMs] of HOSTILE_NUMBERS.filter(([w]) => w !== "1.5")) {
        await refused(t.b.heartbeat([c.lease], leaseMs as number), /leaseMs must be a number of milliseconds/).catch((e: unknown) => {
          throw new Error(`heartbeat leaseMs = ${what}: ${String(e)}`);
        });
      }
      for (const [what, retryDelayMs] of HOSTILE_NUMBERS.filter(([w]) => w !== "1.5" && w !== "null")) {
        await refused(
          t.b.fail([{ lease: c.lease, error: errorInfo("x"), retryDelayMs: retryDelayMs as number }]),
          /retryDelayMs must be a number of milliseconds from 0 to/,
        ).catch((e: unknown) => {
          throw new Error(`retryDelayMs = ${what}: ${String(e)}`);
        });
      }
      await refused(
        t.b.complete([{ lease: { jobId: c.lease.jobId, token: "1" as unknown as number }, result: null }]),
        /a lease is \{ jobId: string, token: integer \}/,
      );
      await refused(t.b.complete("x" as unknown as []), /settle calls take an array/);
      await refused(t.b.appendLogs(c.lease, [1 as unknown as string]), /log lines must be an array of strings/);
      if (t.factory.capabilities.jobRecords) expect((await mustGet(t.b, id)).state).toBe("active");
      // The lease still holds: the refused calls changed nothing.
      expect(await t.b.complete([{ lease: c.lease, result: null }])).toEqual(["applied"]);
    });

    it("list refuses a bad page size, offset, state, time bound, filter or cursor the same way on every store", async () => {
      const id = await enqueueOne(t.b);
      const each = async (what: string, call: () => Promise<unknown>, message: RegExp): Promise<void> => {
        await refused(call(), message).catch((e: unknown) => {
          throw new Error(`${what}: ${String(e)}`);
        });
      };
      // null means "the default" for limit and offset; a limit past the ceiling is clamped (below).
      for (const [what, limit] of [...HOSTILE_NUMBERS.filter(([w]) => !["null", "2^53", "1e300"].includes(w)), ["0", 0] as [string, unknown]]) {
        await each(`limit = ${what}`, () => t.b.list({}, { limit: limit as number }), /page\.limit must be an integer >= 1/);
      }
      for (const [what, offset] of HOSTILE_NUMBERS.filter(([w]) => w !== "null")) {
        await each(`offset = ${what}`, () => t.b.list({}, { offset: offset as number }), /page\.offset must be an integer from 0 to 1000000000/);
      }
      for (const field of ["createdFrom", "createdUntil"] as const) {
        for (const [what, value] of HOSTILE_NUMBERS) {
          await each(`${field} = ${what}`, () => t.b.list({ [field]: value as number }), new RegExp(`filter\\.${field} must be a time in ms`));
        }
      }
      await each("state", () => t.b.list({ state: "bogus" as JobState }), /unknown job state "bogus"/);
      await each("queue", () => t.b.list({ queue: 5 as unknown as string }), /filter\.queue must be a string/);
      await each("name", () => t.b.list({ name: {} as unknown as string }), /filter\.name must be a string/);
      await each("filter", () => t.b.list(null as unknown as ListFilter), /the list filter must be an object/);
      await each("page", () => t.b.list({}, "first" as unknown as Page), /the list page must be an object/);
      await each("after ''", () => t.b.list({ queue: QUEUE }, { after: "" }), /page\.after must be the id of the last job/);
      await each("before 7", () => t.b.list({ queue: QUEUE }, { before: 7 as unknown as string }), /page\.before must be the id of the first job/);
      await each("after, no queue", () => t.b.list({}, { after: id }), /page\.after needs filter\.queue/);
      await each("before, no queue", () => t.b.list({}, { before: id }), /page\.before needs filter\.queue/);
      await each("after and before", () => t.b.list({ queue: QUEUE }, { after: id, before: id }), /exclude each other/);
      // The refusals are not blanket ones: good arguments answer, an oversized page is clamped.
      if (t.factory.capabilities.jobRecords) {
        expect((await t.b.list({ queue: QUEUE }, { limit: 2 ** 53, offset: 0 })).map((j) => j.id)).toEqual([id]);
        expect(await t.b.list({ queue: QUEUE }, { after: id })).toEqual([]);
      }
    });

    itNeeds(t, ["finishedWindows"])("finishedWindow refuses a bad window or sample limit the same way on every store", async () => {
      for (const [what, value] of HOSTILE_NUMBERS) {
        await refused(t.b.finishedWindow(QUEUE, value as number, 1_000, 10), /fromMs must be a time in ms/).catch((e: unknown) => {
          throw new Error(`fromMs = ${what}: ${String(e)}`);
        });
        await refused(t.b.finishedWindow(QUEUE, 0, value as number, 10), /untilMs must be a time in ms/);
      }
      for (const [what, value] of [...HOSTILE_NUMBERS, ["1001", 1_001] as [string, unknown]]) {
        await refused(t.b.finishedWindow(QUEUE, 0, 1_000, value as number), /sampleLimit must be/).catch((e: unknown) => {
          throw new Error(`sampleLimit = ${what}: ${String(e)}`);
        });
      }
      await refused(t.b.finishedWindow(QUEUE, 2_000, 1_000, 10), /finishedWindow needs fromMs <= untilMs/);
      await refused(t.b.finishedWindow("bad queue", 0, 1_000, 10), /queue name must be/, "queue");
      expect(await t.b.finishedWindow(QUEUE, 0, 1_000, 10)).toEqual({ completed: 0, dead: 0, samples: [] });
    });

    it("enqueue and enqueueFlow with { tx }: refused by a store without transactional enqueue, and a tx that is no client is refused by any", async () => {
      const flow: FlowNodeSpec[] = [{ spec: spec({ jobId: "tx-parent" }), parent: null, onChildFailure: "fail" }];
      if (!t.factory.capabilities.transactionalEnqueue) {
        const tx = { query: async () => ({ rows: [] }) };
        await refused(t.b.enqueue([spec({ jobId: "tx-job" })], { tx }), /cannot join your transaction \(capabilities\.transactionalEnqueue is false\)/);
        if (t.factory.capabilities.flows !== "none") await refused(t.b.enqueueFlow(flow, { tx }), /cannot join your transaction/);
      } else {
        await refused(
          t.b.enqueue([spec({ jobId: "tx-job" })], { tx: {} }),
          /must be a client inside your open transaction with a query\(text, params\) method/,
        );
        await refused(t.b.enqueueFlow(flow, { tx: "BEGIN" }), /must be a client inside your open transaction/);
      }
      if (t.factory.capabilities.jobRecords) expect(await totalJobs(t.b)).toBe(0);
    });

    it("rescueExpired and prune refuse bad limits and apply the documented defaults", async () => {
      for (const [what, value] of [...HOSTILE_NUMBERS.filter(([w]) => w !== "null"), ["0", 0] as [string, unknown]]) {
        await refused(t.b.rescueExpired({ maxStalls: value as number }), /maxStalls must be an integer from 1 to/).catch((e: unknown) => {
          throw new Error(`maxStalls = ${what}: ${String(e)}`);
        });
        await refused(t.b.rescueExpired({ limit: value as number }), /limit must be an integer from 1 to/);
        await refused(t.b.prune({ limit: value as number }), /limit must be an integer from 1 to/);
      }
      await refused(t.b.prune({ maxDeadPerQueue: -1 }), /maxDeadPerQueue must be an integer from 0 to/);
      await refused(t.b.prune({ maxCompletedPerQueue: Number.NaN }), /maxCompletedPerQueue must be an integer from 0 to \d+; got NaN/);
      expect(await t.b.rescueExpired()).toEqual([]);
      expect(await t.b.prune()).toEqual({ jobs: 0, idempotencyKeys: 0 });
    });

    itNeeds(t, ["idempotencyKeys"])("idempotency.once refuses an empty key and a ttl that is no positive number of ms", async () => {
      await refused(t.b.idempotency.once("", 1_000), /an idempotency key must be a non-empty string/);
      for (const ttl of [Number.NaN, 0, -5, Number.POSITIVE_INFINITY]) await refused(t.b.idempotency.once("k", ttl), /ttlMs must be a number of milliseconds/);
      expect(await t.b.idempotency.once("k", 1_000)).toBe(true);
    });

    itNeeds(t, ["queueLimits"])("holdQueue refuses a hold that is not a positive number of ms", async () => {
      for (const forMs of [Number.NaN, -1, Number.POSITIVE_INFINITY]) await expect(t.b.holdQueue(QUEUE, forMs)).rejects.toThrow(InvalidInputError);
      expect(await t.b.getQueueFlow(QUEUE)).toBeNull();
    });

    it("a call the store cannot do at all is refused with UnsupportedByStoreError naming the capability", async () => {
      const caps = t.factory.capabilities;
      const expectRefusal = async (call: () => Promise<unknown>, capability: string): Promise<void> => {
        const error: unknown = await call().then(
          () => null,
          (e: unknown) => e,
        );
        expect(error, capability).toBeInstanceOf(UnsupportedByStoreError);
        expect(error).toMatchObject({ capability });
        expect((error as Error).message).toContain(`capabilities.${capability} is false`);
      };
      if (!caps.cancel) await expectRefusal(() => t.b.cancel("x", QUEUE), "cancel");
      if (!caps.pause) await expectRefusal(() => t.b.pause(QUEUE), "pause");
      if (!caps.queueLimits) await expectRefusal(() => t.b.holdQueue(QUEUE, 1_000), "queueLimits");
      if (!caps.schedules) await expectRefusal(() => t.b.scheduleList(), "schedules");
      if (!caps.idempotencyKeys) await expectRefusal(() => t.b.idempotency.once("k", 1_000), "idempotencyKeys");
      if (!caps.dedupWindows) await expectRefusal(() => t.b.enqueue([spec({ dedup: { key: "d", ttlMs: 1_000 } })]), "dedupWindows");
      if (!caps.priorities) await refused(t.b.enqueue([spec({ priority: 1 })]), /has no priorities/, "options.priority");
      // A store with every feature answers these calls (the refusals above are not blanket ones).
      if (caps.cancel) expect(await t.b.cancel("none", QUEUE)).toBe("not-found");
      if (caps.schedules) expect(await t.b.scheduleList()).toEqual([]);
    });

    // The declared capabilities checked against behaviour, both ways: a suite given the backend's
    // own `capabilities` (Kafka, RabbitMQ) must still fail when they say more or less than the
    // store does. Each call runs whatever the declaration says, and must match it.
    it("the declared capabilities match what the store does (a declared feature works; a lacking one is refused)", async () => {
      const caps = t.factory.capabilities;
      const outcome = async (call: () => Promise<unknown>): Promise<"works" | "refused"> => {
        try {
          await call();
          return "works";
        } catch (error) {
          if (error instanceof UnsupportedByStoreError || (error instanceof InvalidInputError && /has no priorities/.test(error.message))) return "refused";
          throw error;
        }
      };
      const expectations: [string, boolean, () => Promise<unknown>][] = [
        ["cancel", caps.cancel, () => t.b.cancel("none", QUEUE)],
        ["pause", caps.pause, () => t.b.pause("capability-probe")],
        ["queueLimits", caps.queueLimits, () => t.b.getQueueFlow(QUEUE)],
        ["schedules", caps.schedules, () => t.b.scheduleList()],
        ["idempotencyKeys", caps.idempotencyKeys, () => t.b.idempotency.once("capability-probe", 60_000)],
        ["dedupWindows", caps.dedupWindows, () => t.b.enqueue([spec({ dedup: { key: "capability-probe", ttlMs: 1_000 } })])],
        ["priorities", caps.priorities, () => t.b.enqueue([spec({ priority: 1 })])],
      ];
      for (const [capability, declared, call] of expectations) {
        expect(await outcome(call), `capabilities.${capability} is ${declared}`).toBe(declared ? "works" : "refused");
      }
      // uniqueIds: a second job with a taken id is a duplicate exactly when the store keeps ids unique.
      await t.b.enqueue([spec({ jobId: "capability-probe-id" })]);
      const [second] = await t.b.enqueue([spec({ jobId: "capability-probe-id" })]);
      expect(second!.duplicate, `capabilities.uniqueIds is ${caps.uniqueIds}`).toBe(caps.uniqueIds);
    });
  });
}
