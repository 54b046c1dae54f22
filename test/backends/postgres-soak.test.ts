/**
 * The short version of the bloat soak (`npm run bench -- --backend postgres --soak` is the long
 * one): 25 s of churn at 1,500 jobs/s with the default retention, on a server of its own whose
 * autovacuum wakes every second instead of every minute, so a short run sees several rounds.
 * The jobs table's size and dead tuples must level off, not keep growing.
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
    const result = await runSoak({ url: server!.url, durationMs: 25_000, ratePerSecond: 1_500, sampleEveryMs: 2_000 });
    const last = result.samples.at(-1)!;
    // Boundedness, not speed (the machine is shared; throughput is the benchmark's business): the
    // verdict below, plus enough churn to turn the retained rows (1,000 completed) over several
    // times and vacuum to have run, without which a level table would prove nothing.
    expect(last.processed).toBeGreaterThan(5 * 1_000);
    expect(last.autovacuums).toBeGreaterThan(0);
    // Live rows stay near retention plus what is in flight, however many were made.
    expect(last.liveTuples).toBeLessThan(15_000);
    expect(result.reason).toMatch(/second half peaks/);
    expect(result.bounded).toBe(true);
  }, 90_000);
});
