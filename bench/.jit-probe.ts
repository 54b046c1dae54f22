import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../test/helpers/postgres.js";

const delayed = Number(process.argv[2] ?? 1_000_000);
const server = await startThrowawayPostgres({ database: "bench" });
try {
  const backend = new PostgresBackend({ connectionString: server.url, logger: silentLogger });
  await backend.migrate();
  const q = new Queue("bench", { backend });
  for (let s = 0; s < delayed; s += 5000) await q.addBulk(Array.from({ length: 5000 }, (_, k) => ({ name: "noop", data: { i: s + k }, options: { delayMs: 86_400_000 } })));
  for (let s = 0; s < 10000; s += 5000) await q.addBulk(Array.from({ length: 5000 }, (_, k) => ({ name: "noop", data: { i: s + k } })));
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  await c.query("VACUUM ANALYZE conveyor.jobs");
  console.log((await c.query("SELECT pg_jit_available() AS a, current_setting('jit') AS jit")).rows);
  const sql = (backend as unknown as { sql: Record<string, string> }).sql.claim!;
  await c.query(`PREPARE claim(bigint, text[], text[], int, bigint, text, text, int, boolean) AS ${sql}`);
  const args = "NULL, '{bench}', '{noop}', 500, 30000, 'w', 'h', 1, false";
  for (const jit of ["on", "off", "on", "off"]) {
    await c.query(`SET jit = ${jit}`);
    await c.query("SET plan_cache_mode = force_generic_plan");
    await c.query("BEGIN");
    const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS) EXECUTE claim(${args})`);
    await c.query("ROLLBACK");
    const lines = rows.map((r) => r["QUERY PLAN"] as string);
    console.log(`jit=${jit}:`, lines.filter((l) => /JIT|Execution Time|Timing|Functions|Options|^Update/.test(l)).join("\n"));
    if (jit === "on") console.log(lines.slice(0, 200).join("\n").slice(0, 100));
  }
  await c.end();
  await backend.close();
} finally {
  await server.stop();
}
