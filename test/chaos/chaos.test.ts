/**
 * The short chaos runs of CI: per backend, the "mixed" scenario (every fault kind at once: worker
 * SIGKILLs and failpoints, SIGSTOP past the lease, SIGTERM at load, the store crashing, connections
 * cut, poison pills) for CHAOS_SECONDS (default 30) of faults plus the drain, through the CLI
 * workers and a producer process, failing on any bound broken. The seed is CHAOS_SEED or a fixed
 * one, printed with the table; `npm run chaos -- --backend B --scenario mixed --seed S` replays it.
 *
 * PostgreSQL and Redis run on throwaway servers of their own (the chaos crashes them), and are
 * skipped, saying why, when no server is installed.
 */
import { afterAll, describe, expect, it, onTestFailed } from "vitest";
import { runScenario } from "../../chaos/harness.js";
import { parseSeed } from "../../chaos/prng.js";
import { formatTable } from "../../chaos/report.js";
import { DEFAULT_MAX_HEALTHY_DEAD } from "../../chaos/scenarios.js";
import { BACKENDS, openStore, unavailable, type BackendKind } from "../../chaos/stores.js";
import { TempDirs } from "../helpers/temp.js";

const SECONDS = Number(process.env.CHAOS_SECONDS ?? 30);
const SEED = parseSeed(process.env.CHAOS_SEED ?? "20261130");
/** Healthy jobs that may end dead-lettered (each explained by faults); see DEFAULT_MAX_HEALTHY_DEAD. */
const MAX_HEALTHY_DEAD = process.env.CHAOS_MAX_HEALTHY_DEAD === undefined ? DEFAULT_MAX_HEALTHY_DEAD : Number(process.env.CHAOS_MAX_HEALTHY_DEAD);
const temp = new TempDirs("conveyor-chaos-");
/** Evidence of a failed run stays on disk (its path is in the failure message). */
let keepEvidence = false;

afterAll(async () => {
  if (!keepEvidence) await temp.removeAll();
});

const why = new Map<BackendKind, string | null>();
for (const backend of BACKENDS) if (backend !== "rabbitmq") why.set(backend, await unavailable(backend));

describe("chaos, short runs", () => {
  // RabbitMQ's short runs (a clean one and a planted bug, on one broker) are in rabbitmq.test.ts.
  for (const backend of BACKENDS.filter((b) => b !== "rabbitmq")) {
    const skip = why.get(backend) ?? null;
    it.skipIf(skip !== null)(
      `${backend}: every bound holds under mixed faults${skip ? ` (skipped: ${skip})` : ""}`,
      { timeout: (SECONDS + 150) * 1000 },
      async () => {
        onTestFailed(() => {
          keepEvidence = true;
        });
        const rootDir = await temp.make();
        const store = await openStore(backend);
        try {
          const result = await runScenario({ backend, scenario: "mixed", seconds: SECONDS, seed: SEED, store, rootDir, maxHealthyDead: MAX_HEALTHY_DEAD });
          console.log(formatTable([result]));
          expect(result.notRun).toBeNull();
          const brokenBounds = (result.check?.bounds ?? [])
            .filter((b) => !b.ok)
            .map((b) => ({ bound: b.name, limit: b.limit, value: b.value, examples: b.examples }));
          expect(brokenBounds, `seed ${SEED}; evidence in ${result.dir}`).toEqual([]);
          expect(result.check?.metrics.enqueuedOk).toBeGreaterThan(0);
        } finally {
          await store.close();
        }
      },
    );
  }
});
