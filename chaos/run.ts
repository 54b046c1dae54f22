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
import { formatTable, formatTimings } from "./report.js";
import { DEFAULT_MAX_HEALTHY_DEAD, FAILOVER_SCENARIOS, SCENARIO_DEFS, SCENARIOS, type ScenarioName } from "./scenarios.js";
import { BACKENDS, openStore, unavailable, type BackendKind, type Store } from "./stores.js";
import { backendOf, openTopologyStore } from "./topologies.js";

const USAGE = `npm run chaos -- --backend sqlite|postgres|redis|rabbitmq [--seconds N] [--seed S] [--scenario NAME|all] [--max-healthy-dead N]
scenarios: ${SCENARIOS.join(", ")}, all (default: all; --seconds is then split between them)
--max-healthy-dead: healthy jobs a scenario may end with dead-lettered, each explained by faults (default ${DEFAULT_MAX_HEALTHY_DEAD})
npm run chaos -- --scenario outbox [--source pg-poll|pg-cdc|sqlite-poll] [--target redis|rabbitmq|queue] [--seconds N] [--seed S]
                    the transactional outbox and its relays (default: --source pg-poll --target redis)
npm run chaos -- --scenario schedule --backend B [--seconds N] [--seed S]   cron schedules: kills around ticks, blackouts, skewed clocks
npm run chaos -- --scenario ${FAILOVER_SCENARIOS.join("|")}|failover [--backend B] [--seconds N] [--seed S] [--workers N] [--wait-replicas N]
  failover scenarios (docs/failover.md); each but rolling-restart brings its own replicated store and
  implies its backend; rolling-restart runs on --backend (default postgres), --workers overrides its 20 workers,
  --wait-replicas runs the Redis backend with waitForReplicas (WAIT after each write; default 0, off)`;

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
        source: { type: "string" },
        target: { type: "string" },
        workers: { type: "string" },
        "wait-replicas": { type: "string" },
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
  if (values.scenario !== "outbox" && (values.source !== undefined || values.target !== undefined)) {
    console.error(`--source and --target belong to --scenario outbox\n${USAGE}`);
    return 2;
  }
  if (values.scenario === "outbox") {
    // The outbox scenario has its own fleet (producer, relays, Redis target) and checker: chaos/outbox-scenario.ts.
    const { runOutboxScenario, formatOutboxTable, OUTBOX_SOURCES, OUTBOX_TARGETS } = await import("./outbox-scenario.js");
    const source = (values.source ?? "pg-poll") as (typeof OUTBOX_SOURCES)[number];
    const target = (values.target ?? "redis") as (typeof OUTBOX_TARGETS)[number];
    if (!OUTBOX_SOURCES.includes(source) || !OUTBOX_TARGETS.includes(target)) {
      console.error(`--source must be one of ${OUTBOX_SOURCES.join(", ")} and --target one of ${OUTBOX_TARGETS.join(", ")}\n${USAGE}`);
      return 2;
    }
    const seed = values.seed !== undefined ? parseSeed(values.seed) : randomInt(1, 2 ** 31);
    const seconds = values.seconds === undefined ? 60 : Number(values.seconds);
    if (!Number.isFinite(seconds) || seconds < 1) {
      console.error(`--seconds must be a number >= 1\n${USAGE}`);
      return 2;
    }
    console.log(`chaos: scenario outbox, source ${source}, target ${target}, seed ${seed}, ${seconds} s`);
    const result = await runOutboxScenario({ seconds, seed, source, target, log: (line) => console.log(`  ${line}`) });
    console.log(
      `\n${formatOutboxTable(result)}\n\nreproduce: npm run chaos -- --scenario outbox --source ${source} --target ${target} --seed ${seed} --seconds ${seconds}`,
    );
    return result.ok ? 0 : 1;
  }
  if (values.scenario === "failover" || FAILOVER_SCENARIOS.includes(values.scenario as never)) return runFailover(values);
  const backend = values.backend as BackendKind | undefined;
  if (!backend || !BACKENDS.includes(backend)) {
    console.error(`--backend must be one of ${BACKENDS.join(", ")}\n${USAGE}`);
    return 2;
  }
  if (values.scenario === "schedule") {
    // Cron schedules under kills around tick times, blackouts and skewed clocks: chaos/schedule-scenario.ts.
    const { runScheduleScenario, formatScheduleTable } = await import("./schedule-scenario.js");
    const seed = values.seed !== undefined ? parseSeed(values.seed) : randomInt(1, 2 ** 31);
    const seconds = values.seconds === undefined ? 60 : Number(values.seconds);
    const why = await unavailable(backend);
    if (why) {
      console.error(`cannot run on ${backend}: ${why}`);
      return 2;
    }
    console.log(
      `chaos: scenario schedule on ${backend} (3 workers + 1 scheduler, two clocks skewed, kills around ticks, blackouts), seed ${seed}, ${seconds} s`,
    );
    const result = await runScheduleScenario({ backend, seconds, seed, log: (line) => console.log(`  ${line}`) });
    console.log(`\n${formatScheduleTable(result)}\n`);
    for (const problem of result.problems) console.log(`  ! ${problem}`);
    console.log(`evidence: ${result.dir}\nreproduce: npm run chaos -- --scenario schedule --backend ${backend} --seed ${seed} --seconds ${seconds}`);
    return result.ok ? 0 : 1;
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
  console.log(
    `\nreproduce: npm run chaos -- --backend ${backend} --seed ${seed} --seconds ${total} --scenario ${scenarioArg} --max-healthy-dead ${maxHealthyDead}`,
  );
  return results.every((r) => r.ok) ? 0 : 1;
}

/** The failover scenarios: each on the store it brings (rolling-restart on --backend). */
async function runFailover(values: {
  backend?: string;
  seconds?: string;
  seed?: string;
  scenario?: string;
  "max-healthy-dead"?: string;
  workers?: string;
  "wait-replicas"?: string;
}): Promise<number> {
  const waitReplicas = values["wait-replicas"] === undefined ? 0 : Number(values["wait-replicas"]);
  if (!Number.isInteger(waitReplicas) || waitReplicas < 0) {
    console.error(`--wait-replicas must be an integer >= 0\n${USAGE}`);
    return 2;
  }
  const scenarios = values.scenario === "failover" ? [...FAILOVER_SCENARIOS] : [values.scenario as (typeof FAILOVER_SCENARIOS)[number]];
  const seconds = values.seconds === undefined ? 60 : Number(values.seconds);
  if (!Number.isFinite(seconds) || seconds < 8) {
    console.error(`--seconds must be a number >= 8 (per scenario)\n${USAGE}`);
    return 2;
  }
  const workers = values.workers === undefined ? undefined : Number(values.workers);
  if (workers !== undefined && (!Number.isInteger(workers) || workers < 1)) {
    console.error(`--workers must be an integer >= 1\n${USAGE}`);
    return 2;
  }
  const given = values.backend as BackendKind | undefined;
  if (given !== undefined && !BACKENDS.includes(given)) {
    console.error(`--backend must be one of ${BACKENDS.join(", ")}\n${USAGE}`);
    return 2;
  }
  const seed = values.seed !== undefined ? parseSeed(values.seed) : randomInt(1, 2 ** 31);
  const maxHealthyDead = values["max-healthy-dead"] === undefined ? DEFAULT_MAX_HEALTHY_DEAD : Number(values["max-healthy-dead"]);
  const results: ScenarioResult[] = [];
  for (const scenario of scenarios) {
    const topology = SCENARIO_DEFS[scenario].topology;
    const backend: BackendKind = topology ? backendOf(topology) : (given ?? "postgres");
    if (topology && given !== undefined && given !== backend) {
      console.error(`${scenario} runs on ${backend} (its own ${topology} store), not ${given}`);
      return 2;
    }
    const why = await unavailable(backend);
    if (why) {
      console.error(`chaos: ${scenario} cannot run here: ${why}`);
      return 2;
    }
    const rootDir = join(ROOT, ".tmp", "chaos", `failover-${seed}`);
    console.log(`chaos: ${scenario} on ${topology ?? backend}, seed ${seed}, ${seconds} s; evidence in ${join(rootDir, scenario)}`);
    const store: Store = topology ? await openTopologyStore(topology, { waitReplicas }) : await openStore(backend);
    try {
      results.push(
        await runScenario({
          backend,
          scenario,
          seconds,
          seed,
          store,
          rootDir,
          maxHealthyDead,
          ...(workers ? { workers } : {}),
          log: (line) => console.log(`  ${line}`),
        }),
      );
    } finally {
      await store.close();
    }
  }
  console.log("");
  console.log(formatTable(results));
  console.log(formatTimings(results));
  const flags = `--seed ${seed} --seconds ${seconds}${given ? ` --backend ${given}` : ""}${workers ? ` --workers ${workers}` : ""}${waitReplicas ? ` --wait-replicas ${waitReplicas}` : ""}`;
  console.log(`\nreproduce: npm run chaos -- --scenario ${values.scenario} ${flags}`);
  return results.every((r) => r.ok) ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
