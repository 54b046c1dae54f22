/**
 * The short failover runs of the suite (test/chaos/failover-*.test.ts): one scenario on its
 * store, every bound held, and every failover, slot move or rollout followed by a job claimed and
 * completed after it (the fleet really came back, on its own). `npm run chaos -- --scenario NAME
 * --seed S --seconds N` replays one; the 10-minute runs are in docs/failover.md.
 */
import { expect, onTestFailed } from "vitest";
import { runScenario } from "../../chaos/harness.js";
import { formatTable, formatTimings } from "../../chaos/report.js";
import type { FailoverScenarioName } from "../../chaos/scenarios.js";
import { openStore, type BackendKind } from "../../chaos/stores.js";
import { backendOf, openTopologyStore, type TopologyKind } from "../../chaos/topologies.js";
import { SCENARIO_DEFS } from "../../chaos/scenarios.js";
import { parseSeed } from "../../chaos/prng.js";
import { TempDirs } from "../helpers/temp.js";

export const SEED = parseSeed(process.env.CHAOS_SEED ?? "20261201");

export async function shortFailoverRun(
  temp: TempDirs,
  scenario: FailoverScenarioName,
  options: { seconds: number; backend?: BackendKind; workers?: number; onFailure: () => void },
): Promise<void> {
  onTestFailed(options.onFailure);
  const topology: TopologyKind | undefined = SCENARIO_DEFS[scenario].topology;
  const backend = topology ? backendOf(topology) : options.backend!;
  const rootDir = await temp.make();
  const store = topology ? await openTopologyStore(topology) : await openStore(backend);
  try {
    const result = await runScenario({
      backend,
      scenario,
      seconds: options.seconds,
      seed: SEED,
      store,
      rootDir,
      ...(options.workers ? { workers: options.workers } : {}),
    });
    console.log(`${formatTable([result])}${formatTimings([result])}`);
    expect(result.notRun).toBeNull();
    const broken = (result.check?.bounds ?? []).filter((b) => !b.ok).map((b) => ({ bound: b.name, limit: b.limit, value: b.value, examples: b.examples }));
    expect(broken, `seed ${SEED}; evidence in ${result.dir}`).toEqual([]);
    expect(result.check?.metrics.enqueuedOk).toBeGreaterThan(0);
    const kinds = SCENARIO_DEFS[scenario].faults;
    expect(result.timings.length, "the fault this scenario exists for happened").toBeGreaterThan(0);
    for (const kind of kinds) {
      // The reshard follows the failover and its rejoin (10-20 s on a loaded machine): short runs may drop it.
      if (kind === "reshard" && options.seconds < 30) continue;
      expect(
        result.timings.some((t) => t.kind === kind),
        `a ${kind} happened`,
      ).toBe(true);
    }
    for (const t of result.timings) {
      expect(t.firstCompletionMs, `a job was claimed and completed after the ${t.kind} at +${t.offsetMs} ms`).not.toBeNull();
    }
  } finally {
    await store.close();
  }
}
