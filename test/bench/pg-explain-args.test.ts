/**
 * The benches that EXPLAIN Conveyor's PostgreSQL statements (bench/pg-explain.ts, bench/pg-event-log.ts)
 * write the statements' parameters by hand. When a statement gained parameters, both benches
 * stopped at their first EXPLAIN with PostgreSQL's bind error, unnoticed until run: the lists are
 * checked against the rendered statements here, where a new parameter fails the suite instead.
 */
import { afterAll, describe, expect, it } from "vitest";
import { CLAIM_ARGS, enqueueArgs, parameterCount, statements } from "../../bench/pg-explain.js";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { silentLogger } from "../../src/index.js";

// Rendering the statements needs no server: the pool connects on its first query, and none is sent.
const backend = new PostgresBackend({ connectionString: "postgresql://unused@127.0.0.1:1/unused", logger: silentLogger });
afterAll(() => backend.close());

describe("pg-explain's hand-written parameter lists", () => {
  const sql = statements(backend);

  it("count the parameters as PostgreSQL does: the highest $n outside comments", () => {
    expect(parameterCount("SELECT $1, $12 -- not $40\n, $3")).toBe(12);
    expect(parameterCount("SELECT 1")).toBe(0);
  });

  it("give the claim, the enqueue and complete-and-claim as many parameters as the statements take", () => {
    expect(CLAIM_ARGS).toHaveLength(parameterCount(sql.claim!));
    expect(CLAIM_ARGS).toHaveLength(parameterCount(sql["claim-one"]!));
    expect(enqueueArgs(["a"], [{}])).toHaveLength(parameterCount(sql.enqueue!));
    // complete-and-claim: now, ids, tokens, results, then the claim's parameters after its `now`.
    expect(4 + CLAIM_ARGS.length - 1).toBe(parameterCount(sql["complete-and-claim"]!));
    expect(4 + CLAIM_ARGS.length - 1).toBe(parameterCount(sql["complete-and-claim-one"]!));
  });
});
