/**
 * `npm run chaos -- --backend sqlite|postgres|redis|rabbitmq [--seconds N] [--seed S] [--scenario NAME|all]`
 *
 * Runs one scenario, or all of them one after another (the fault time is then split evenly),
 * prints the report table and exits 0 when every bound held, 1 when one broke, 2 on a usage error.
 * Evidence (ledgers, worker logs, plan, report.json) stays in .tmp/chaos/<backend>-<seed>/.
 */
import { randomInt } from "node:crypto";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { runScenario, type ScenarioResult } from "./harness.js";
import { ROOT } from "./fleet.js";
import { parseSeed } from "./prng.js";
import { formatTable } from "./report.js";
import { DEFAULT_MAX_HEALTHY_DEAD, SCENARIOS, type ScenarioName } from "./scenarios.js";
import { BACKENDS, openStore, unavailable, type BackendKind } from "./stores.js";

const USAGE = `npm run chaos -- --backend sqlite|postgres|redis|rabbitmq [--seconds N] [--seed S] [--scenario NAME|all] [--max-healthy-dead N]
scenarios: ${SCENARIOS.join(", ")}, all (default: all; --seconds is then split between them)
--max-healthy-dead: healthy jobs a scenario may end with dead-lettered, each explained by faults (default ${DEFAULT_MAX_HEALTHY_DEAD})
npm run chaos -- --scenario outbox [--seconds N] [--seed S]   the transactional outbox and its relays (PostgreSQL, Redis)`;

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        backend: { type: "string" },
        seconds: { type: "string" },
        seed: { type: "string" },
        scenario: { type: "string", default: "all" },
        "max-healthy-dead": { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    }));
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (values.scenario === "outbox") {
    // The outbox scenario has its own fleet (producer, relays, Redis target) and checker: chaos/outbox-scenario.ts.
    const { runOutboxScenario, formatOutboxTable } = await import("./outbox-scenario.js");
    const seed = values.seed !== undefined ? parseSeed(values.seed) : randomInt(1, 2 ** 31);
    const seconds = values.seconds === undefined ? 60 : Number(values.seconds);
    console.log(`chaos: scenario outbox (PostgreSQL outbox, two relays, Redis stream target), seed ${seed}, ${seconds} s`);
    const result = await runOutboxScenario({ seconds, seed, log: (line) => console.log(`  ${line}`) });
    console.log(`\n${formatOutboxTable(result)}\n\nreproduce: npm run chaos -- --scenario outbox --seed ${seed} --seconds ${seconds}`);
    return result.ok ? 0 : 1;
  }
  const backend = values.backend as BackendKind | undefined;
  if (!backend || !BACKENDS.includes(backend)) {
    console.error(`--backend must be one of ${BACKENDS.join(", ")}\n${USAGE}`);
    return 2;
  }
  const scenarioArg = values.scenario ?? "all";
  const scenarios: ScenarioName[] = scenarioArg === "all" ? [...SCENARIOS] : [scenarioArg as ScenarioName];
  if (!scenarios.every((s) => SCENARIOS.includes(s))) {
    console.error(`unknown scenario ${scenarioArg}\n${USAGE}`);
    return 2;
  }
  const total = values.seconds === undefined ? (scenarioArg === "all" ? 240 : 60) : Number(values.seconds);
  if (!Number.isFinite(total) || total < 8 * (scenarioArg === "all" ? scenarios.length : 1)) {
    console.error(`--seconds must be a number >= 8 per scenario\n${USAGE}`);
    return 2;
  }
  const seconds = Math.floor(total / scenarios.length);
  const seed = values.seed !== undefined ? parseSeed(values.seed) : randomInt(1, 2 ** 31);
  const maxHealthyDead = values["max-healthy-dead"] === undefined ? DEFAULT_MAX_HEALTHY_DEAD : Number(values["max-healthy-dead"]);
  if (!Number.isInteger(maxHealthyDead) || maxHealthyDead < 0) {
    console.error(`--max-healthy-dead must be an integer >= 0\n${USAGE}`);
    return 2;
  }

  const why = await unavailable(backend);
  if (why) {
    console.error(`chaos: backend ${backend} cannot run here: ${why}`);
    return 2;
  }
  const rootDir = join(ROOT, ".tmp", "chaos", `${backend}-${seed}`);
  console.log(`chaos: backend ${backend}, seed ${seed}, scenarios ${scenarios.join(", ")}, ${seconds} s each; evidence in ${rootDir}`);
  const store = await openStore(backend);
  const results: ScenarioResult[] = [];
  try {
    for (const scenario of scenarios) {
      results.push(await runScenario({ backend, scenario, seconds, seed, store, rootDir, maxHealthyDead, log: (line) => console.log(`  ${line}`) }));
    }
  } finally {
    await store.close();
  }
  console.log("");
  console.log(formatTable(results));
  console.log(`\nreproduce: npm run chaos -- --backend ${backend} --seed ${seed} --seconds ${total} --scenario ${scenarioArg} --max-healthy-dead ${maxHealthyDead}`);
  return results.every((r) => r.ok) ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
