/**
 * The RabbitMQ chaos runs of CI, on one private broker node (booting one takes seconds):
 *
 * 1. a planted bug: workers that acknowledge every Nth job without running it
 *    (CHAOS_PLANT=ack-without-run:N, chaos/handlers.ts). RabbitMQ keeps no job records, so the
 *    verdict rests on the broker model (chaos/broker-final.ts): such a job is in no handler's
 *    ledger as finished, not in the dead queue and not queued: the checker must report it lost;
 * 2. the short clean run: the "mixed" scenario (worker SIGKILLs, failpoints, SIGSTOP, SIGTERM,
 *    graceful broker restarts, connections closed by the broker, poison pills) for
 *    CHAOS_RABBITMQ_SECONDS (default 30; each graceful broker restart takes ~10 s of it) of faults plus the drain, every bound holding.
 *
 * Skipped, saying why, when no rabbitmq-server is installed.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from "vitest";
import { runScenario } from "../../chaos/harness.js";
import { parseSeed } from "../../chaos/prng.js";
import { formatTable } from "../../chaos/report.js";
import { openStore, unavailable, type Store } from "../../chaos/stores.js";
import { TempDirs } from "../helpers/temp.js";

const SECONDS = Number(process.env.CHAOS_RABBITMQ_SECONDS ?? 30);
const SEED = parseSeed(process.env.CHAOS_SEED ?? "20261130");
const skip = await unavailable("rabbitmq");
const temp = new TempDirs("conveyor-chaos-rabbitmq-");
let keepEvidence = false;
let store: Store | null = null;

beforeAll(async () => {
  if (skip === null) store = await openStore("rabbitmq");
}, 180_000);

afterAll(async () => {
  await store?.close();
  if (!keepEvidence) await temp.removeAll();
}, 60_000);

const brokenBounds = (result: Awaited<ReturnType<typeof runScenario>>) =>
  (result.check?.bounds ?? []).filter((b) => !b.ok).map((b) => ({ bound: b.name, limit: b.limit, value: b.value, examples: b.examples }));

describe.skipIf(skip !== null)(`chaos on RabbitMQ${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("reports jobs lost when workers acknowledge jobs they never ran (planted bug)", { timeout: 150_000 }, async () => {
    onTestFailed(() => {
      keepEvidence = true;
    });
    const result = await runScenario({
      backend: "rabbitmq",
      scenario: "kill",
      seconds: 8,
      seed: SEED,
      store: store!,
      rootDir: await temp.make(),
      plant: "ack-without-run:15",
    });
    console.log(formatTable([result]));
    const broken = brokenBounds(result);
    expect(result.ok).toBe(false);
    expect(result.check?.metrics.lost).toBeGreaterThan(0);
    // Each lost job is one no handler finished (its only runs, if any, were failed attempts before
    // the planted acknowledgement) and the broker no longer has, dead or queued.
    const lost = broken.find((b) => b.bound === "lost");
    expect(lost?.examples.length).toBeGreaterThan(0);
    for (const example of lost?.examples ?? []) expect(example).toMatch(/no handler finished it, not dead-lettered, not queued, \d+ run\(s\)/);
    // The planted bug is the only thing wrong with the run.
    expect(broken.map((b) => b.bound)).toEqual(["lost"]);
  });

  it("every bound holds under mixed faults", { timeout: (SECONDS + 150) * 1000 }, async () => {
    onTestFailed(() => {
      keepEvidence = true;
    });
    const result = await runScenario({
      backend: "rabbitmq",
      scenario: "mixed",
      seconds: SECONDS,
      seed: SEED,
      store: store!,
      rootDir: await temp.make(),
      maxHealthyDead: 0,
    });
    console.log(formatTable([result]));
    expect(result.notRun).toBeNull();
    expect(brokenBounds(result), `seed ${SEED}; evidence in ${result.dir}`).toEqual([]);
    expect(result.check?.model).toBe("broker");
    expect(result.check?.metrics.enqueuedOk).toBeGreaterThan(0);
  });
});
