/**
 * `conveyor-jobs/postgres`: the production backend. Importing this subpath loads `pg`
 * (node-postgres), an optional peer dependency (`npm install pg@8`).
 *
 * ```ts
 * import { PostgresBackend } from "conveyor-jobs/postgres";
 * const backend = new PostgresBackend({ connectionString: process.env.DATABASE_URL });
 * await backend.migrate(); // once at startup; safe from every process at once
 * ```
 *
 * Transactional enqueue: pass a client inside your open transaction as `{ tx }`, and the job
 * commits or rolls back with your own writes (and wakes workers only once committed):
 *
 * ```ts
 * const client = await pool.connect();
 * await client.query("BEGIN");
 * await client.query("INSERT INTO orders …", […]);
 * await queue.add("send-receipt", { orderId }, { tx: client });
 * await client.query("COMMIT");
 * ```
 *
 * `tx` can be any object with `query(text, params)` that runs on your transaction's connection,
 * accepts `$1`-style parameters with JS arrays as PostgreSQL arrays, and resolves to `{ rows }` or
 * to the rows themselves. Adapters for other libraries are one line:
 *
 * ```ts
 * // Kysely, inside db.transaction().execute(async (trx) => …)
 * const tx = { query: (text, params) => trx.executeQuery(CompiledQuery.raw(text, params)) };
 * // postgres.js, inside sql.begin(async (sql) => …)
 * const tx = { query: (text, params) => sql.unsafe(text, params) };
 * // Drizzle on node-postgres: the PoolClient under your transaction, or Kysely/pg as above.
 * ```
 *
 * Transactional completion: a handler calls `ctx.tx()` for a client inside a transaction that
 * also completes the job, fenced by its lease (see `JobContext.tx`).
 */
export { PostgresBackend, type PostgresBackendOptions } from "./backend.js";
export { SchemaOutdatedError, SchemaTooNewError } from "./migrate.js";
