/**
 * PostgreSQL's claim keeps the queue list's literal and byte-order range once
 * per list (preparedFor on the frozen list the checking facade hands over: "not per claim",
 * backend.ts claimParams). But claim() hands claimParams `request.queues.filter(...)` whenever
 * ANY queue of the schema has a flow row (limits, a hold, keyed jobs): a fresh array each claim,
 * never frozen, so the 1,000-name literal and range are rebuilt on every claim of every worker,
 * even when none of the named queues is limited.
 */
import { afterEach, describe, expect, inject, it } from "vitest";
import { preparedFor } from "../../src/backend/checked-lists.js";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { normalizeQueueLimits } from "../../src/core/flow.js";
import { silentLogger } from "../../src/index.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const toClose: PostgresBackend[] = [];
afterEach(async () => {
  for (const b of toClose.splice(0)) await b.close();
  await schemas.dropAll();
});

const worker = { id: "w", host: "h", pid: 1 };

/** The queue lists the store's own claim was given (behind the facade). */
function recordLists(): { seen: Set<readonly string[]>; restore(): void } {
  const seen = new Set<readonly string[]>();
  const proto = PostgresBackend.prototype as unknown as { claim: PostgresBackend["claim"] };
  const original = proto.claim;
  proto.claim = function (this: PostgresBackend, request) {
    seen.add(request.queues);
    return original.call(this, request);
  };
  return { seen, restore: () => void (proto.claim = original) };
}

describe("PostgreSQL claim's prepared queue list (review9)", () => {
  for (const otherLimited of [false, true]) {
    it(`is made once per list ${otherLimited ? "when another queue of the schema has limits" : "with no flow row anywhere"}`, async () => {
      const b = new PostgresBackend({ connectionString: url, schema: schemas.create(), logger: silentLogger });
      toClose.push(b);
      await b.migrate();
      if (otherLimited) await b.setQueueLimits("elsewhere", normalizeQueueLimits({ maxRunning: 5 }));
      const queues = Array.from({ length: 50 }, (_, i) => `q${i}`);
      const rec = recordLists();
      try {
        for (let i = 0; i < 3; i++) await b.claim({ queues, names: ["job"], worker, limit: 1, leaseMs: 30_000 });
      } finally {
        rec.restore();
      }
      expect(rec.seen.size).toBe(1);
      const [list] = [...rec.seen];
      // The form the backend made for this list, if it made one; a new one ("none") if it never did.
      const form = preparedFor(list!, "postgres-claim-queues", () => "none");
      expect(form, "claimParams never prepared the facade's list: rebuilt on every claim").not.toBe("none");
    });
  }
});
