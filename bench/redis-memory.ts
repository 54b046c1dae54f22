/**
 * `npx tsx bench/redis-memory.ts [--jobs 20000] [--runs 3]`
 *
 * Only the memory figure of `npm run bench -- --backend redis`: Redis memory per waiting job,
 * Conveyor and BullMQ side by side, measured exactly as the full run measures it (bench/redis.ts,
 * memoryPerJob, medians of `--runs` with the two interleaved), in seconds instead of minutes.
 */
import { parseArgs } from "node:util";
import { main } from "./redis.js";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    runs: { type: "string", default: "3" },
  },
});
await main({ jobs: Number(values.jobs), single: 0, samples: 0, runs: Number(values.runs) }, { only: "memory" });
