/**
 * `npx tsx bench/redis-memory.ts [--jobs 20000] [--runs 1]`
 *
 * Only the memory figure of `npm run bench -- --backend redis`: Redis memory per waiting job,
 * Conveyor and BullMQ side by side, measured exactly as the full run measures it (bench/redis.ts,
 * memoryPerJob), in seconds instead of minutes.
 */
import { parseArgs } from "node:util";
import { main } from "./redis.js";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    runs: { type: "string", default: "1" },
  },
});
await main({ jobs: Number(values.jobs), single: 0, samples: 0, runs: Number(values.runs) }, { memoryOnly: true });
