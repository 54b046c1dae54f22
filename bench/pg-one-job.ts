/**
 * `node scripts/bench.mjs bench/pg-one-job.ts [--rounds 7] [--calls 60]`
 *
 * What a claim of one job costs PostgreSQL's server, through each statement the backend has for
 * it: claim.sql (a claim naming several queues) and claim-one.sql (a claim naming one: what a
 * worker of one queue sends, docs/performance-postgres.md "Session 32"), with the triggers as
 * shipped and with `jobs`' user triggers disabled (the statement triggers of the event log and the
 * counts, and the flow links' row triggers, which a plain claim does not fire). A one-job claim is what a worker waiting
 * for work sends when a job arrives, so its time is part of every enqueue→start sample.
 *
 * Each statement is prepared on one connection and run with its generic plan (what a pooled
 * connection keeps after five executions), through EXPLAIN (ANALYZE, TIMING OFF): the server's
 * execution time, without the per-node timing that would inflate a plan of many nodes. One job is
 * added (through the backend, as a producer would) before each call, so every call claims one.
 * Per round and variant, the median of `--calls` calls (the first ten left out, warming); the
 * table gives the median over rounds, the variants' order turned every round. With TIMING on
 * (medians of 21 calls, after the rounds, so over a table holding every job claimed before): the whole execution time split into the plan's top node, the triggers, and the rest, which
 * is mostly starting and ending every node of the plan (per-node timing inflates all three).
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { machineLine, median } from "./lib.js";
import { statements } from "./pg-explain.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "7" }, calls: { type: "string", default: "60" } } });
const rounds = Number(values.rounds);
const calls = Number(values.calls);
if (!Number.isInteger(rounds) || rounds < 1 || !Number.isInteger(calls) || calls < 11) {
  console.error(`--rounds ${values.rounds} --calls ${values.calls}: expected whole numbers, at least 1 and 11`);
  process.exit(2);
}

/** claim.sql's and claim-one.sql's parameter types ($1..$12). */
const TYPES = "bigint, text[], text[], int, bigint, text, text, int, boolean, int, text, text";
const ARGS = "(NULL, '{bench}', '{noop}', 10, 30000, 'w', 'h', 1, false, NULL, 'bench', 'bench')";

const server = await startThrowawayPostgres();
const backend = new PostgresBackend({ connectionString: server.url, logger: silentLogger });
await backend.migrate();
const queue = new Queue("bench", { backend });
const client = new pg.Client({ connectionString: server.url });
await client.connect();
console.log(`A one-job claim's server time, ${rounds} rounds of ${calls} calls; ${machineLine()}\n`);
try {
  await client.query("SET jit = off");
  const sql = statements(backend);
  await client.query(`PREPARE claim_many(${TYPES}) AS ${sql.claim}`);
  await client.query(`PREPARE claim_one(${TYPES}) AS ${sql["claim-one"]}`);
  await client.query("SET plan_cache_mode = force_generic_plan");
  const setTriggers = (on: boolean) => client.query(`ALTER TABLE conveyor.jobs ${on ? "ENABLE" : "DISABLE"} TRIGGER USER`);
  type Plan = {
    "Execution Time": number;
    Plan: { "Actual Total Time": number; "Actual Rows": number; "Shared Hit Blocks": number };
    Triggers?: Array<{ Time: number }>;
  };
  const explain = async (statement: string, options: string): Promise<Plan> => {
    await queue.add("noop", null);
    const { rows } = await client.query<{ "QUERY PLAN": Plan[] }>(`EXPLAIN (${options}, FORMAT JSON) EXECUTE ${statement}${ARGS}`);
    const plan = rows[0]!["QUERY PLAN"][0]!;
    if (plan.Plan["Actual Rows"] !== 1) throw new Error(`${statement} claimed ${plan.Plan["Actual Rows"]} jobs, expected 1`);
    return plan;
  };
  const variants = [
    { name: "claim.sql, triggers as shipped", statement: "claim_many", triggers: true },
    { name: "claim-one.sql, triggers as shipped", statement: "claim_one", triggers: true },
    { name: "claim.sql, user triggers off", statement: "claim_many", triggers: false },
    { name: "claim-one.sql, user triggers off", statement: "claim_one", triggers: false },
  ];
  const perRound = variants.map(() => [] as number[]);
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < variants.length; k++) {
      const i = (k + round) % variants.length;
      const v = variants[i]!;
      await setTriggers(v.triggers);
      const times: number[] = [];
      for (let c = 0; c < calls; c++) times.push((await explain(v.statement, "ANALYZE, TIMING OFF"))["Execution Time"]);
      perRound[i]!.push(median(times.slice(10)));
    }
  }
  console.log("| statement | execution, ms (median of rounds) | per round |\n| --- | ---: | --- |");
  variants.forEach((v, i) => console.log(`| ${v.name} | ${median(perRound[i]!).toFixed(3)} | ${perRound[i]!.map((t) => t.toFixed(3)).join(", ")} |`));
  console.log(
    "\nWith TIMING on (triggers as shipped): the whole execution, the plan's top node, the triggers, and what is left (starting and ending the plan's nodes); shared buffers hit",
  );
  await setTriggers(true);
  for (const statement of ["claim_many", "claim_one"]) {
    const parts: number[][] = [[], [], [], [], []];
    for (let c = 0; c < 21; c++) {
      const plan = await explain(statement, "ANALYZE, BUFFERS");
      const triggers = (plan.Triggers ?? []).reduce((sum, t) => sum + t.Time, 0);
      const top = plan.Plan["Actual Total Time"];
      const whole = plan["Execution Time"];
      [whole, top, triggers, whole - top - triggers, plan.Plan["Shared Hit Blocks"]].forEach((x, k) => parts[k]!.push(x));
    }
    const [whole, top, triggers, rest, buffers] = parts.map((p) => median(p));
    console.log(
      `  ${statement === "claim_many" ? "claim.sql" : "claim-one.sql"} (medians of 21 calls): execution ${whole!.toFixed(3)} ms, top node ${top!.toFixed(3)}, triggers ${triggers!.toFixed(3)}, the rest ${rest!.toFixed(3)}; ${buffers} buffers`,
    );
  }
} finally {
  await client.end();
  await backend.close();
  await server.stop();
}
