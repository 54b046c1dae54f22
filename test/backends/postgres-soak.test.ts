/**
 * The short version of the bloat soak (`npm run bench -- --backend postgres --soak` is the long
 * one): 16,000 jobs of churn (offered at up to 1,000 jobs/s) with the default retention, on a
 * server of its own whose autovacuum wakes every second instead of every minute, so a short run
 * sees several rounds. The jobs table's size and dead tuples must level off, not keep growing.
 * The run is a number of jobs, not a length of time: it asserts boundedness only, never speed
 * (the machine is shared; throughput is the benchmark's business).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runSoak } from "../../bench/pg-soak.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../helpers/postgres.js";

// The autovacuum period is a server setting: a server given through DATABASE_URL keeps its own.
const external = Boolean(process.env.DATABASE_URL);
let server: ThrowawayPostgres | null = null;

beforeAll(async () => {
  if (!external) server = await startThrowawayPostgres({ database: "soak", settings: { autovacuum_naptime: "1s" } });
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

describe.skipIf(external)("postgres bloat soak (short) [needs a throwaway server, not DATABASE_URL]", () => {
  it("keeps the jobs table and its dead tuples bounded under steady churn", async () => {
    // 16 times the retained rows (1,000 completed): the table turns over many times, so a level
    // table means vacuum and pruning keep up, not that too little happened to grow it.
    const result = await runSoak({ url: server!.url, until: { jobs: 16_000 }, ratePerSecond: 1_000, maxBacklog: 2_000, sampleEveryMs: 1_000 });
    // Live rows stay near retention (1,000) plus the backlog (2,000 at most) plus what completed
    // since the last prune (every 5 s), however many jobs were made: without pruning they would
    // reach 16,000.
    expect(Math.max(...result.samples.map((s) => s.liveTuples))).toBeLessThan(10_000);
    // The verdict: a second half no larger than 1.5x the first half's peak, dead tuples falling
    // back, and autovacuum having run (without it there is nothing to judge).
    expect(result.reason).toMatch(/second half peaks/);
    expect(result.bounded).toBe(true);
  }, 120_000);
});
